// `echo-js-async`: `echo-js` as an async (WASI 0.3) component: its world
// exports `run` as an `async func`, so `host skill build` builds it with
// componentize-qjs's default, the component model's async ABI.

import { log } from "skillhost:skill/log@0.1.0";
import { SkillError, echo } from "./echo.js";

export const manifest = () => ({
  id: "echo-js-async",
  name: "Echo (JavaScript, async)",
  version: "0.1.0",
  description: "Repeats a message; the echo skill in JavaScript, as an async (WASI 0.3) component",
  capabilities: ["log"],
  retry: { maxAttempts: 1, initialBackoffMs: 0 },
  estimatedDurationMs: 1,
});

// What `run` throws becomes its `skill-error`: an object with `code`,
// `message` and `retryable`. Anything else thrown (a TypeError, say) would
// trap and lose its message, so it becomes `internal` with its message.
function asSkillError(error) {
  if (error instanceof SkillError) {
    return { code: error.code, message: error.message, retryable: error.retryable };
  }
  log("error", String(error && error.stack ? error.stack : error));
  return { code: "internal", message: String(error && error.message ? error.message : error), retryable: false };
}

export async function run(input) {
  try {
    // componentize-qjs hands a `u32` above 2^31 over as a negative number:
    // `>>> 0` reads it back as the unsigned value it is.
    const output = echo(input.message, input.repeat >>> 0);
    log("info", `echo: ${output.length} characters`);
    return output;
  } catch (error) {
    throw asSkillError(error);
  }
}
