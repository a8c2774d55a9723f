#!/usr/bin/env python3
"""A LocalAI-style backend in Python, for Warden's compatibility tests.

Built the way LocalAI's own Python backends are (backend/python/*/backend.py):
stubs generated from backend.proto next to this file, argparse with only
--addr (anything else exits 2 before serving), a parent-death watch honouring
LOCALAI_BACKEND_PARENT_WATCH, 50 MB message limits, SIGTERM stops the server,
and "model identity mismatch" answered NOT_FOUND. It is not a model: Predict
echoes, Embedding hashes, TTS writes a short WAV.

What the tests check is written to a JSON file: $COMPAT_RECORD_DIR/<pid>.json
holds argv, cwd, the environment, the parent pid and, after LoadModel, the
fields it received. Options it understands (ModelOptions.Options, "key:value"):
  token_delay_ms:N   PredictStream waits N ms between replies (default 0)
"""

import argparse
import json
import os
import signal
import struct
import sys
import threading
import time
import wave
import zlib
from concurrent import futures

import grpc

import backend_pb2
import backend_pb2_grpc

MAX_MESSAGE_BYTES = 50 * 1024 * 1024
MAX_WORKERS = int(os.environ.get("PYTHON_GRPC_MAX_WORKERS", "8"))
MISMATCH = "model identity mismatch"
PARENT_WATCH_ARMED = False

_record_lock = threading.Lock()
_record = {}


def write_record(**updates):
    """Merges `updates` into the record and rewrites the file atomically."""
    directory = os.environ.get("COMPAT_RECORD_DIR", "")
    with _record_lock:
        _record.update(updates)
        if directory == "":
            return
        path = os.path.join(directory, "{}.json".format(os.getpid()))
        tmp = path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(_record, f)
        os.replace(tmp, path)


def parent_watch_enabled():
    return os.environ.get("LOCALAI_BACKEND_PARENT_WATCH", "").strip().lower() not in ("false", "0", "no", "off")


def parent_watch_interval():
    raw = os.environ.get("LOCALAI_BACKEND_PARENT_WATCH_INTERVAL", "").strip()
    try:
        if raw.endswith("ms"):
            return max(0.01, float(raw[:-2]) / 1000.0)
        if raw.endswith("s"):
            return max(0.01, float(raw[:-1]))
        if raw != "":
            return max(0.01, float(raw))
    except ValueError:
        pass
    return 2.0


def start_parent_watch():
    """As upstream: exit when reparented away from the process that started us."""
    global PARENT_WATCH_ARMED
    if not parent_watch_enabled():
        return
    orig = os.getppid()
    if orig <= 1:
        return
    interval = parent_watch_interval()

    def watch():
        while True:
            time.sleep(interval)
            ppid = os.getppid()
            if ppid != orig or ppid == 1:
                print("backend parent process (pid {}) exited; self-terminating".format(orig), file=sys.stderr, flush=True)
                os._exit(1)

    threading.Thread(target=watch, name="parent-death-watcher", daemon=True).start()
    PARENT_WATCH_ARMED = True


class Servicer(backend_pb2_grpc.BackendServicer):
    def __init__(self):
        self.lock = threading.Lock()
        self.model = None
        self.token_delay_s = 0.0
        self.active_streams = 0

    def _guard(self, identity, context):
        """Upstream's check: a request meant for another model is NOT_FOUND."""
        with self.lock:
            held = self.model
        if held is None:
            context.abort(grpc.StatusCode.FAILED_PRECONDITION, "no model loaded")
        if identity != "" and identity != held:
            context.abort(grpc.StatusCode.NOT_FOUND, "{}: loaded {!r}, request for {!r}".format(MISMATCH, held, identity))
        return held

    def Health(self, request, context):
        return backend_pb2.Reply(message=b"OK")

    def LoadModel(self, request, context):
        fields = {
            "Model": request.Model,
            "ModelFile": request.ModelFile,
            "ModelPath": request.ModelPath,
            "ContextSize": request.ContextSize,
            "NBatch": request.NBatch,
            "NGPULayers": request.NGPULayers,
            "Threads": request.Threads,
            "MMap": request.MMap,
            "FlashAttention": request.FlashAttention,
            "CUDA": request.CUDA,
            "Options": list(request.Options),
        }
        write_record(loadModel=fields)
        if request.ModelFile != "" and not os.path.isabs(request.ModelFile):
            return backend_pb2.Result(success=False, message="ModelFile must be absolute, got {!r}".format(request.ModelFile))
        if request.ModelFile != "" and not os.path.exists(request.ModelFile):
            return backend_pb2.Result(success=False, message="model file not found: {}".format(request.ModelFile))
        delay = 0.0
        for opt in request.Options:
            key, _, value = opt.partition(":")
            if key == "token_delay_ms":
                delay = float(value) / 1000.0
        with self.lock:
            self.model = request.Model
            self.token_delay_s = delay
        return backend_pb2.Result(success=True, message="loaded {}".format(request.Model))

    def Predict(self, request, context):
        held = self._guard(request.ModelIdentity, context)
        text = "{}:{}".format(held, request.Prompt)
        return backend_pb2.Reply(message=text.encode(), tokens=len(request.Prompt), prompt_tokens=len(request.Prompt))

    def PredictStream(self, request, context):
        held = self._guard(request.ModelIdentity, context)
        count = request.Tokens if request.Tokens > 0 else 5
        with self.lock:
            self.active_streams += 1
            delay = self.token_delay_s
        try:
            for i in range(count):
                if not context.is_active():
                    return
                yield backend_pb2.Reply(message="{}:{}".format(held, i).encode(), tokens=1)
                if delay > 0:
                    time.sleep(delay)
        finally:
            with self.lock:
                self.active_streams -= 1

    def Embedding(self, request, context):
        self._guard(request.ModelIdentity, context)
        seed = zlib.crc32(request.Embeddings.encode() or request.Prompt.encode())
        vec = [((seed >> (i % 32)) & 0xFF) / 255.0 for i in range(8)]
        return backend_pb2.EmbeddingResult(embeddings=vec, dim=len(vec), tokens=len(request.Prompt))

    def TTS(self, request, context):
        self._guard(request.ModelIdentity, context)
        if request.dst == "":
            return backend_pb2.Result(success=False, message="dst is required")
        with wave.open(request.dst, "wb") as w:
            w.setnchannels(1)
            w.setsampwidth(2)
            w.setframerate(16000)
            w.writeframes(b"".join(struct.pack("<h", (i * 37) % 2000) for i in range(160 * max(1, len(request.text)))))
        return backend_pb2.Result(success=True, message="wrote {}".format(request.dst))

    def Free(self, request, context):
        with self.lock:
            self.model = None
        write_record(freed=True)
        return backend_pb2.Result(success=True, message="freed")

    def Status(self, request, context):
        with self.lock:
            loaded = self.model is not None
            streams = self.active_streams
        state = backend_pb2.StatusResponse.READY if loaded else backend_pb2.StatusResponse.UNINITIALIZED
        mem = backend_pb2.MemoryUsageData(total=1024 * 1024, breakdown={"active_streams": streams, "parent_watch_armed": 1 if PARENT_WATCH_ARMED else 0})
        return backend_pb2.StatusResponse(state=state, memory=mem)


def serve(address):
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=MAX_WORKERS),
        options=[
            ("grpc.max_message_length", MAX_MESSAGE_BYTES),
            ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
            ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
        ],
    )
    backend_pb2_grpc.add_BackendServicer_to_server(Servicer(), server)
    if server.add_insecure_port(address) == 0:
        print("cannot bind {}".format(address), file=sys.stderr, flush=True)
        sys.exit(1)
    server.start()
    print("Server started. Listening on: " + address, file=sys.stderr, flush=True)

    def on_signal(sig, frame):
        print("Received termination signal. Shutting down...", file=sys.stderr, flush=True)
        server.stop(0)

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    server.wait_for_termination()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="Run the gRPC server.")
    parser.add_argument("--addr", default="localhost:50051", help="The address to bind the server to.")
    args = parser.parse_args()  # exits 2 on any other argument, as upstream backends do
    write_record(argv=sys.argv, cwd=os.getcwd(), env=dict(os.environ), ppid=os.getppid(), pid=os.getpid())
    start_parent_watch()
    serve(args.addr)
