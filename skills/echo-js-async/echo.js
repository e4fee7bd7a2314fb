// The echo skill's logic, with no host import: `node --test` runs it as is.

// Larger outputs are refused rather than built.
export const MAX_OUTPUT_BYTES = 1 << 20;

/** A `skill-error`: throw it from `run` (skill.js turns it into the result). */
export class SkillError extends Error {
  constructor(code, message, retryable = false) {
    super(message);
    this.code = code;
    this.retryable = retryable;
  }
}

/** Bytes of `text` in UTF-8 (QuickJS has no TextEncoder). */
export function utf8Length(text) {
  let bytes = 0;
  for (const c of text) {
    const p = c.codePointAt(0);
    bytes += p < 0x80 ? 1 : p < 0x800 ? 2 : p < 0x10000 ? 3 : 4;
  }
  return bytes;
}

/** `message` repeated `repeat` times, and its length in Unicode scalar values. */
export function echo(message, repeat) {
  const size = utf8Length(message);
  const total = size * repeat;
  if (total > MAX_OUTPUT_BYTES) {
    throw new SkillError(
      "invalid-input",
      `${size} bytes repeated ${repeat} times is ${total} bytes, more than ${MAX_OUTPUT_BYTES}`,
    );
  }
  const text = message.repeat(repeat);
  return { message: text, length: [...text].length };
}
