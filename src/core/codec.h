/*
 * Compression and decompression contexts: one set per ring (ring.c; a
 * reader's too), each made the first time its codec and direction is
 * used (a writer's compressor with its ring, codec_prepare(); a reader
 * of lz4 or plain frames makes no zstd context) and reused for every
 * batch after. Each batch is compressed as an independent frame and every
 * call resets its context's session first, so any batch decodes alone,
 * in any order, with a fresh context.
 */
#ifndef USHI_CODEC_H
#define USHI_CODEC_H

#include "core/internal.h"

struct ushi_codec_ctx {
	void *lz4_state;
	struct ZSTD_CCtx_s *zc;
	struct ZSTD_DCtx_s *zd;
};

/* Makes no context yet: 0. */
int codec_init(struct ushi_codec_ctx *c);
/* Makes codec's compression context now (none for USH_CODEC_NONE), so
 * that no batch pays for it: 0 or -ENOMEM. */
int codec_prepare(struct ushi_codec_ctx *c, enum ush_codec codec);
void codec_destroy(struct ushi_codec_ctx *c);
/*
 * Compresses src into dst (cap bytes). Returns the compressed size, 0 if
 * the result would not be smaller than n (store raw), or a negative error
 * (-ENOMEM: its context could not be made).
 */
long codec_compress(struct ushi_codec_ctx *c, enum ush_codec codec, int level,
		    const void *src, size_t n, void *dst, size_t cap);
/* Decompresses exactly raw bytes into dst; returns 0, USH_ECODEC, or
 * -ENOMEM when its context could not be made. */
int codec_decompress(struct ushi_codec_ctx *c, enum ush_codec codec,
		     const void *src, size_t n, void *dst, size_t raw);

#endif
