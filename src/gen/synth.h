/* Synthetic payloads for `stoker gen`: deterministic bytes and JPEG images
 * (or PNG, WebP) from a seeded stream, so the same seed writes the same dataset. */
#ifndef STOKER_SYNTH_H
#define STOKER_SYNTH_H

#include <stddef.h>
#include <stdint.h>

#include "../base/base.h"

/* Encode a w x h RGB JPEG (quality 1..100) whose content is drawn from rng
 * (smooth gradients plus noise, so it compresses like a photo rather than
 * a flat fill). *out is malloc'ed and owned by the caller. */
int stk__jpeg_synth(struct stk_rng *rng, int w, int h, int quality, uint8_t **out, size_t *len,
                    char *err);

/* The same picture (the same draws from rng) encoded as enc: JPEG, a
 * lossless PNG, or a WebP (lossy at quality, lossless at 100). */
enum { STK__SYNTH_JPEG = 0, STK__SYNTH_PNG, STK__SYNTH_WEBP };
int stk__image_synth(struct stk_rng *rng, int w, int h, int quality, int enc, uint8_t **out,
                     size_t *len, char *err);

#endif
