/* Frame sealing with AES-256-GCM and HKDF-SHA256 (OpenSSL); see seal.h. */
#include "core/seal.h"

#include <errno.h>
#include <openssl/core_names.h>
#include <openssl/evp.h>
#include <openssl/kdf.h>

/* Header bytes before the CRC: the associated data, with the key id. */
#define AAD_HDR 44

int seal_init(struct ushi_seal *s)
{
	s->ctx = EVP_CIPHER_CTX_new();
	if (!s->ctx ||
	    !EVP_CipherInit_ex(s->ctx, EVP_aes_256_gcm(), NULL, NULL, NULL, 1)) {
		seal_fini(s);
		return ushi_fail(-ENOMEM, "seal: AES-256-GCM context");
	}
	return 0;
}

void seal_fini(struct ushi_seal *s)
{
	EVP_CIPHER_CTX_free(s->ctx);
	s->ctx = NULL;
	s->key = NULL;
}

int seal_derive(uint8_t sub[USH_SEAL_KEY_SIZE],
		const uint8_t key[USH_SEAL_KEY_SIZE],
		const uint8_t salt[USHI_SEAL_SALT], const char *app,
		uint32_t shuffle, uint32_t map, uint32_t attempt)
{
	static const char label[] = "ushuffle seal v1";
	uint8_t info[sizeof(label) + 64 + 12];
	size_t alen = strnlen(app, 64), n = sizeof(label);
	memcpy(info, label, n); /* its NUL ends the label */
	memcpy(info + n, app, alen);
	n += alen;
	put_le32(info + n, shuffle);
	put_le32(info + n + 4, map);
	put_le32(info + n + 8, attempt);
	n += 12;
	EVP_KDF *kdf = EVP_KDF_fetch(NULL, "HKDF", NULL);
	EVP_KDF_CTX *k = kdf ? EVP_KDF_CTX_new(kdf) : NULL;
	OSSL_PARAM p[] = {
		OSSL_PARAM_construct_utf8_string(OSSL_KDF_PARAM_DIGEST,
						 (char *)"SHA256", 0),
		OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_KEY,
						  (void *)key,
						  USH_SEAL_KEY_SIZE),
		OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_SALT,
						  (void *)salt, USHI_SEAL_SALT),
		OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_INFO, info,
						  n),
		OSSL_PARAM_construct_end(),
	};
	int ok = k && EVP_KDF_derive(k, sub, USH_SEAL_KEY_SIZE, p) > 0;
	EVP_KDF_CTX_free(k);
	EVP_KDF_free(kdf);
	return ok ? 0 : ushi_fail(-EIO, "seal: HKDF-SHA256 failed");
}

/* The nonce: partition and seq, unique per frame of one writer. */
static void nonce_of(const struct ushi_frame *f, uint8_t iv[12])
{
	put_le32(iv, f->partition);
	put_le64(iv + 4, f->seq);
}

/* Starts ctx on one frame (enc 1: seal, 0: open) with its associated
 * data: header bytes 0..43 and the key id in the trailer. */
static int start(struct ushi_seal *s, const uint8_t *sub, int enc,
		 const uint8_t *hdr, const uint8_t *kid,
		 const struct ushi_frame *f)
{
	uint8_t iv[12];
	int n;
	nonce_of(f, iv);
	EVP_CIPHER_CTX *c = s->ctx;
	const uint8_t *key = sub == s->key ? NULL : sub;
	s->key = NULL; /* until the init below succeeds */
	if (!EVP_CipherInit_ex(c, NULL, NULL, key, iv, enc))
		return 0;
	s->key = sub;
	return EVP_CipherUpdate(c, NULL, &n, hdr, AAD_HDR) &&
	       EVP_CipherUpdate(c, NULL, &n, kid, 4);
}

int seal_frame(struct ushi_seal *s, const uint8_t sub[USH_SEAL_KEY_SIZE],
	       uint32_t key_id, uint8_t *hdr, const struct ushi_frame *f)
{
	uint32_t len = f->payload_len - USHI_SEAL_TRAILER;
	uint8_t *p = hdr + USH_FRAME_HDR_SIZE, *trailer = p + len;
	int n;
	put_le32(trailer, key_id);
	/* Encrypted in place: GCM is a stream mode, output = input. */
	if (!start(s, sub, 1, hdr, trailer, f) ||
	    (len && !EVP_CipherUpdate(s->ctx, p, &n, p, (int)len)) ||
	    !EVP_CipherFinal_ex(s->ctx, p + len, &n) ||
	    !EVP_CIPHER_CTX_ctrl(s->ctx, EVP_CTRL_GCM_GET_TAG, USHI_SEAL_TAG,
				 trailer + 4))
		return ushi_fail(-EIO, "seal: AES-256-GCM failed on partition "
				"%u seq %llu", f->partition,
				(unsigned long long)f->seq);
	return 0;
}

uint32_t seal_key_id(const uint8_t *frame, const struct ushi_frame *f)
{
	return get_le32(frame + USH_FRAME_HDR_SIZE + f->payload_len -
			USHI_SEAL_TRAILER);
}

int seal_open(struct ushi_seal *s, const uint8_t sub[USH_SEAL_KEY_SIZE],
	      const uint8_t *frame, const struct ushi_frame *f, uint8_t *out)
{
	uint32_t len = f->payload_len - USHI_SEAL_TRAILER;
	const uint8_t *p = frame + USH_FRAME_HDR_SIZE, *trailer = p + len;
	uint8_t tag[USHI_SEAL_TAG];
	int n;
	memcpy(tag, trailer + 4, sizeof(tag)); /* ctrl takes a non-const */
	/* The tag is checked by Final, before the caller uses out. */
	return start(s, sub, 0, frame, trailer, f) &&
	       (!len || EVP_CipherUpdate(s->ctx, out, &n, p, (int)len)) &&
	       EVP_CIPHER_CTX_ctrl(s->ctx, EVP_CTRL_GCM_SET_TAG, USHI_SEAL_TAG,
				   tag) &&
	       EVP_CipherFinal_ex(s->ctx, out + len, &n) > 0 ? 0 : USH_ECORRUPT;
}
