/* Synthetic payloads for `stoker gen`: deterministic bytes and JPEG images
 * from a seeded stream, so the same seed writes the same dataset. */
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

#endif
