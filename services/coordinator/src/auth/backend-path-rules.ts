/**
 * What the `backend.Backend` pass-through lets a caller say about files on
 * the node. LocalAI's protocol passes media by path: a backend reads `src`
 * and writes `dst` as the agent's user, on whichever node the model runs.
 * Through the coordinator that path is chosen by a remote caller who can
 * neither upload to it nor read from it, so every field that names a file
 * is ruled here, by `Message.field` (backend.proto names are unique):
 *
 * - `refuse`: must be empty; set, the call is PERMISSION_DENIED naming it.
 * - `name`: a plain name (a voice, a format): no `/`, `\`, NUL, `.` or `..`.
 * - `noPaths`: free-form backend settings (maps, `key:value` lists) Warden
 *   cannot parse: a value that looks like an absolute path, a home path, a
 *   `file:` URL or climbs with `..` is refused.
 * - `content`: the field carries data or a name that is not a file (a reason
 *   says why); listed so the table test knows it was looked at.
 *
 * Nothing is rewritten: a per-call directory on the coordinator would not be
 * the node's, and the caller could not fetch the file either way. The OpenAI
 * HTTP routes carry the bytes and choose their paths themselves.
 * backend-path-rules.test.ts derives every path-like field from the
 * descriptors and requires a row here, so a new upstream field fails it.
 */
export type PathRuleKind = "refuse" | "name" | "noPaths" | "content";

export interface PathRule {
  readonly kind: PathRuleKind;
  readonly reason: string;
}

const out = "an output file the backend writes on its node";
const input = "an input file the backend reads on its node";
const loadCfg = "loading configuration: Warden loads the model from the agent's catalog; a caller's file would be read on the node";
const job = "fine-tuning and quantization read and write model files on the node: not an inference caller's to name";
const freeForm = "backend-specific settings: values that look like a path are refused";

const refuse = (reason: string): PathRule => ({ kind: "refuse", reason });
const plainName = (reason: string): PathRule => ({ kind: "name", reason });
const noPaths = (reason: string = freeForm): PathRule => ({ kind: "noPaths", reason });
const content = (reason: string): PathRule => ({ kind: "content", reason });

export const backendPathRules: Readonly<Record<string, PathRule>> = Object.freeze({
  // Inference
  "PredictOptions.PromptCachePath": refuse("llama.cpp-style backends write their prompt cache to this file"),
  "PredictOptions.Images": content("base64 image data, as LocalAI sends it"),
  "PredictOptions.Videos": content("base64 video data, as LocalAI sends it"),
  "PredictOptions.Audios": content("base64 audio data, as LocalAI sends it"),
  "PredictOptions.UseTokenizerTemplate": content("a flag: apply the model's chat template"),
  // Images, video, 3D
  "GenerateImageRequest.dst": refuse(out),
  "GenerateImageRequest.src": refuse(input),
  "GenerateImageRequest.ref_images": refuse(input),
  "UpscaleImageRequest.src": refuse(input),
  "UpscaleImageRequest.dst": refuse(out),
  "GenerateVideoRequest.start_image": refuse(input),
  "GenerateVideoRequest.end_image": refuse(input),
  "GenerateVideoRequest.dst": refuse(out),
  "GenerateVideoRequest.audio": refuse(input),
  "GenerateVideoRequest.params": noPaths(),
  "Generate3DRequest.src": refuse(input),
  "Generate3DRequest.dst": refuse(out),
  "Generate3DRequest.params": noPaths(),
  // Speech and audio
  "TranscriptRequest.dst": refuse("the audio file the backend reads on its node"),
  "TranscriptLiveConfig.params": noPaths(),
  "TranscriptLiveRequest.audio": content("a message of PCM samples (TranscriptLiveAudio)"),
  "TranscriptLiveAudio.pcm": content("PCM samples"),
  "TTSRequest.model": plainName("LocalAI puts the voice model's file here; the backend already holds its model"),
  "TTSRequest.dst": refuse(out),
  "TTSRequest.voice": plainName("a voice name; some backends read a reference-audio file by path"),
  "TTSRequest.params": noPaths(),
  "VADRequest.audio": content("PCM samples"),
  "DiarizeRequest.dst": refuse(input),
  "SoundGenerationRequest.model": plainName("LocalAI puts the model's file here; the backend already holds its model"),
  "SoundGenerationRequest.dst": refuse(out),
  "SoundGenerationRequest.src": refuse(input),
  "SoundGenerationRequest.src_divisor": content("a number that scales the src audio"),
  "AudioEncodeRequest.pcm_data": content("PCM samples"),
  "AudioEncodeRequest.options": noPaths(),
  "AudioDecodeRequest.options": noPaths(),
  "AudioTransformRequest.audio_path": refuse(input),
  "AudioTransformRequest.reference_path": refuse(input),
  "AudioTransformRequest.dst": refuse(out),
  "AudioTransformRequest.params": noPaths(),
  "AudioTransformStreamConfig.params": noPaths(),
  "AudioTransformFrame.audio_pcm": content("PCM samples"),
  "AudioTransformFrame.reference_pcm": content("PCM samples"),
  "AudioToAudioConfig.voice": plainName("a voice name; some backends read a reference-audio file by path"),
  "AudioToAudioConfig.params": noPaths(),
  "AudioToAudioConfig.output_sample_rate": content("a sample rate in Hz"),
  // Vision and voice analysis
  "DetectOptions.src": refuse(input),
  "SoundDetectionRequest.src": refuse(input),
  "DepthRequest.src": refuse(input),
  "DepthRequest.dst": refuse(out),
  "DepthRequest.exports": plainName("export formats (glb, ply): written under dst"),
  "FaceVerifyRequest.img1": refuse(input),
  "FaceVerifyRequest.img2": refuse(input),
  "FaceAnalyzeRequest.img": refuse(input),
  "VoiceVerifyRequest.audio1": refuse(input),
  "VoiceVerifyRequest.audio2": refuse(input),
  "VoiceAnalyzeRequest.audio": refuse(input),
  "VoiceEmbedRequest.audio": refuse(input),
  // ModelMetadata takes ModelOptions (LoadModel itself is never forwarded).
  "ModelOptions.Model": noPaths("LocalAI's model file name or hub id (owner/name): an absolute or climbing path is refused"),
  "ModelOptions.ModelFile": refuse(loadCfg),
  "ModelOptions.ModelPath": refuse(loadCfg),
  "ModelOptions.CLIPModel": refuse(loadCfg),
  "ModelOptions.CLIPSubfolder": refuse(loadCfg),
  "ModelOptions.ControlNet": refuse(loadCfg),
  "ModelOptions.Tokenizer": refuse(loadCfg),
  "ModelOptions.LoraBase": refuse(loadCfg),
  "ModelOptions.LoraAdapter": refuse(loadCfg),
  "ModelOptions.LoraAdapters": refuse(loadCfg),
  "ModelOptions.DraftModel": refuse(loadCfg),
  "ModelOptions.AudioPath": refuse(loadCfg),
  "ModelOptions.MMProj": refuse(loadCfg),
  "ModelOptions.EngineArgs": refuse("engine arguments (JSON) name download and tokenizer directories on the node"),
  "ModelOptions.Options": noPaths("backend-specific key:value settings: a value that looks like a path is refused"),
  "ModelOptions.Overrides": content("llama.cpp metadata overrides (key=type:value), not files"),
  "ModelOptions.LoadFormat": content("a weight format name (auto, safetensors, …)"),
  "ModelOptions.LimitImagePerPrompt": content("a count of images per prompt"),
  "ModelOptions.LimitVideoPerPrompt": content("a count of videos per prompt"),
  "ModelOptions.LimitAudioPerPrompt": content("a count of audio clips per prompt"),
  "ModelOptions.IMG2IMG": content("a flag: image-to-image pipeline"),
  "ModelOptions.MaxModelLen": content("a context length in tokens"),
  "ModelOptions.LoraScale": content("a number: the adapter's weight"),
  "ModelOptions.LoraScales": content("numbers: the adapters' weights"),
  "ProxyOptions.api_key_file": refuse("a secret file read on the node"),
  "ProxyOptions.api_key_env": refuse("names a secret in the backend's environment"),
  "ProxyOptions.upstream_url": refuse("where the backend sends requests and its API key"),
  "ProxyOptions.upstream_model": content("the model's name at the upstream provider"),
  // Fine-tuning and quantization jobs
  "FineTuneRequest.model": refuse(job),
  "FineTuneRequest.dataset_source": refuse(job),
  "FineTuneRequest.output_dir": refuse(job),
  "FineTuneRequest.resume_from_checkpoint": refuse(job),
  "FineTuneRequest.extra_options": noPaths(),
  "FineTuneRequest.dataset_split": content("a split name (train, test)"),
  "FineTuneRequest.gradient_checkpointing": content("a flag: trade compute for memory"),
  "FineTuneStopRequest.save_checkpoint": content("a flag: the job saves where it was started to"),
  "ListCheckpointsRequest.output_dir": refuse(job),
  "ExportModelRequest.checkpoint_path": refuse(job),
  "ExportModelRequest.output_path": refuse(job),
  "ExportModelRequest.model": refuse(job),
  "ExportModelRequest.extra_options": noPaths(),
  "ExportModelRequest.export_format": content("a format name (gguf, safetensors)"),
  "QuantizationRequest.model": refuse(job),
  "QuantizationRequest.output_dir": refuse(job),
  "QuantizationRequest.extra_options": noPaths(),
  // Raw HTTP pass-through to an upstream provider
  "ForwardRequest.path": content("the HTTP request path sent to the upstream provider the backend was loaded with, not a file"),
});
