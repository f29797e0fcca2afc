/* lz4 / zstd behind one interface; see codec.h. */
#define ZSTD_STATIC_LINKING_ONLY /* ZSTD_createCCtx_advanced: counted allocs */
#include "core/codec.h"

#include <errno.h>
#include <lz4.h>
#include <stdio.h>
#include <strings.h>
#include <stdlib.h>
#include <zstd.h>
#include <zstd_errors.h>

static void *zalloc(void *opaque, size_t n)
{
	(void)opaque;
	return ushi_malloc(n);
}

static void zfree(void *opaque, void *p)
{
	(void)opaque;
	ushi_free(p);
}

static const ZSTD_customMem zmem = {zalloc, zfree, NULL};

int codec_init(struct ushi_codec_ctx *c)
{
	memset(c, 0, sizeof(*c));
	return 0;
}

/* The context codec needs to compress (compress) or decompress: made at
 * its first use and kept. 0 or -ENOMEM. */
static int need(struct ushi_codec_ctx *c, enum ush_codec codec, bool compress)
{
	if (codec == USH_CODEC_LZ4 && compress && !c->lz4_state)
		c->lz4_state = ushi_malloc((size_t)LZ4_sizeofState());
	else if (codec == USH_CODEC_ZSTD && compress && !c->zc)
		c->zc = ZSTD_createCCtx_advanced(zmem);
	else if (codec == USH_CODEC_ZSTD && !compress && !c->zd)
		c->zd = ZSTD_createDCtx_advanced(zmem);
	else
		return 0;
	return (codec == USH_CODEC_LZ4 ? c->lz4_state != NULL :
		compress ? c->zc != NULL : c->zd != NULL) ? 0 : -ENOMEM;
}

int codec_prepare(struct ushi_codec_ctx *c, enum ush_codec codec)
{
	return need(c, codec, true);
}

void codec_destroy(struct ushi_codec_ctx *c)
{
	ushi_free(c->lz4_state);
	ZSTD_freeCCtx(c->zc);
	ZSTD_freeDCtx(c->zd);
	memset(c, 0, sizeof(*c));
}

long codec_compress(struct ushi_codec_ctx *c, enum ush_codec codec, int level,
		    const void *src, size_t n, void *dst, size_t cap)
{
	/* Only a strictly smaller result is worth storing compressed. */
	if (cap >= n)
		cap = n ? n - 1 : 0;
	if (cap == 0)
		return 0;
	if (need(c, codec, true))
		return -ENOMEM;
	switch (codec) {
	case USH_CODEC_LZ4: {
		/* extState resets the state itself: no history crosses
		 * batches. A result of 0 means it did not fit: store raw. */
		int r = LZ4_compress_fast_extState(c->lz4_state, src, dst,
						   (int)n, (int)cap,
						   level > 0 ? level : 1);
		return r;
	}
	case USH_CODEC_ZSTD: {
		ZSTD_CCtx_reset(c->zc, ZSTD_reset_session_only);
		size_t r = ZSTD_compressCCtx(c->zc, dst, cap, src, n, level);
		if (ZSTD_isError(r))
			return ZSTD_getErrorCode(r) == ZSTD_error_dstSize_tooSmall
				       ? 0
				       : USH_ECODEC;
		return (long)r;
	}
	case USH_CODEC_NONE:
		return 0;
	}
	return -EINVAL;
}

int codec_decompress(struct ushi_codec_ctx *c, enum ush_codec codec,
		     const void *src, size_t n, void *dst, size_t raw)
{
	if (need(c, codec, false))
		return -ENOMEM;
	switch (codec) {
	case USH_CODEC_LZ4: {
		int r = LZ4_decompress_safe(src, dst, (int)n, (int)raw);
		return r == (int)raw ? 0 : USH_ECODEC;
	}
	case USH_CODEC_ZSTD: {
		ZSTD_DCtx_reset(c->zd, ZSTD_reset_session_only);
		size_t r = ZSTD_decompressDCtx(c->zd, dst, raw, src, n);
		return !ZSTD_isError(r) && r == raw ? 0 : USH_ECODEC;
	}
	case USH_CODEC_NONE:
		break;
	}
	return USH_ECODEC;
}

const char *ush_codec_name(enum ush_codec codec)
{
	switch (codec) {
	case USH_CODEC_NONE:
		return "none";
	case USH_CODEC_LZ4:
		return "lz4";
	case USH_CODEC_ZSTD:
		return "zstd";
	}
	return "unknown";
}

int ush_codec_parse(const char *s, enum ush_codec *codec, int *level)
{
	if (!strcmp(s, "none")) {
		*codec = USH_CODEC_NONE;
		*level = 0;
		return 0;
	}
	if (!strcmp(s, "lz4")) {
		*codec = USH_CODEC_LZ4;
		*level = 1;
		return 0;
	}
	if (!strncmp(s, "zstd", 4) && (s[4] == '\0' || s[4] == ':')) {
		int lv = 1;
		if (s[4] == ':') {
			char *end;
			long v = strtol(s + 5, &end, 10);
			if (end == s + 5 || *end || v < ZSTD_minCLevel() ||
			    v > ZSTD_maxCLevel() || v == 0)
				return -EINVAL;
			lv = (int)v;
		}
		*codec = USH_CODEC_ZSTD;
		*level = lv;
		return 0;
	}
	return -EINVAL;
}

long ush_frame_size_of(enum ush_codec codec, int level, const void *batch,
		       size_t raw_len)
{
	if (raw_len > USH_RECORD_MAX + USH_RECORD_HDR_SIZE ||
	    codec > USH_CODEC_ZSTD)
		return -EINVAL;
	if (codec == USH_CODEC_NONE || raw_len == 0)
		return (long)ush_frame_size(raw_len);
	struct ushi_codec_ctx c;
	void *dst = ushi_malloc(raw_len);
	int ret = dst ? codec_init(&c) : -ENOMEM;
	if (ret) {
		ushi_free(dst);
		return ret;
	}
	long n = codec_compress(&c, codec, level, batch, raw_len, dst, raw_len);
	codec_destroy(&c);
	ushi_free(dst);
	if (n < 0)
		return n;
	return (long)ush_frame_size(n > 0 ? (size_t)n : raw_len);
}
