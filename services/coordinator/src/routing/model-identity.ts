import type { BackendHandle, Loader } from "@warden/loader";

/**
 * The ModelIdentity a routed call carries: the name the backend was loaded
 * with (ModelOptions.Model), which is the model's `backendModel` when set
 * (e.g. a Hugging Face repo id) and Warden's model id otherwise. Upstream
 * backends answer any other identity NOT_FOUND "model identity mismatch".
 */
export function modelIdentity<H extends BackendHandle>(loader: Loader<H>, model: string): string {
  return loader.modelSpec(model)?.load.backendModel ?? model;
}
