// skillhost.h: what C skills share, beside the bindings of their world.
//
// `host skill build` writes this file next to the generated bindings
// (`<build dir>/bindings/`), so a skill includes it as it includes its
// world's header: `#include "skillhost.h"`. Everything here is `static
// inline`: a skill that does not use a helper carries none of it.
//
// - `SKILLHOST_STRING_SET(world)` defines `set(out, text)`, which fills a
//   string the skill returns with a copy of `text` (the bindings free every
//   returned string after the call: never point one at a constant).
// - `skillhost_message_t` and `skillhost_put*`: a message built in a fixed
//   buffer without stdio (Debian's wasi-libc makes `snprintf` import WASI,
//   and a component with WASI imports carries the preview1 adapter, whose
//   instantiation costs more than a small skill's work), cut at its
//   capacity, always NUL-terminated. The capacity is
//   `SKILLHOST_MESSAGE_BYTES` (512 unless defined before the include).
// - `skillhost_utf8_chars`: Unicode scalar values in UTF-8 text, the unit
//   the host counts characters in.

#ifndef SKILLHOST_H
#define SKILLHOST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

// `set(out, text)` for the strings of world `world` (its bindings' prefix:
// `echo` for `echo.h`).
#define SKILLHOST_STRING_SET(world)                                  \
  static void set(world##_string_t *out, const char *text) {         \
    world##_string_dup(out, text);                                   \
  }

#ifndef SKILLHOST_MESSAGE_BYTES
#define SKILLHOST_MESSAGE_BYTES 512
#endif

// A message being built, cut at its capacity.
typedef struct {
  char text[SKILLHOST_MESSAGE_BYTES];
  size_t len;
} skillhost_message_t;

// Appends `n` bytes of `s`, as many as fit.
static inline void skillhost_put(skillhost_message_t *m, const char *s, size_t n) {
  if (n > sizeof m->text - 1 - m->len) n = sizeof m->text - 1 - m->len;
  memcpy(m->text + m->len, s, n);
  m->len += n;
  m->text[m->len] = 0;
}

// Appends the NUL-terminated `s`.
static inline void skillhost_put_str(skillhost_message_t *m, const char *s) {
  skillhost_put(m, s, strlen(s));
}

// Appends `n` in decimal.
static inline void skillhost_put_uint(skillhost_message_t *m, uint64_t n) {
  char digits[20];
  size_t i = sizeof digits;
  do {
    digits[--i] = (char)('0' + n % 10);
    n /= 10;
  } while (n);
  skillhost_put(m, digits + i, sizeof digits - i);
}

// Unicode scalar values in UTF-8 `text`: bytes that do not continue a
// character (the host hands over valid UTF-8 only).
static inline uint32_t skillhost_utf8_chars(const uint8_t *text, size_t len) {
  uint32_t n = 0;
  for (size_t i = 0; i < len; i++) n += (text[i] & 0xC0) != 0x80;
  return n;
}

#endif
