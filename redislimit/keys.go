package redislimit

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"time"
	"unsafe"

	"github.com/rlkit/ratelimit"
)

// Key names. The state of key K lives in
//
//	prefix + code + ":" + policy fingerprint + ":{" + digest(K) + "}"
//
// The fingerprint (8 hex digits of SHA-256 over the algorithm and its
// numbers) keeps limiters with different policies apart, so a policy
// change starts fresh instead of reading state written under other
// numbers; a change back to a policy that a previous one shares the
// fingerprint with adds a salt to it (see salted). The digest is the first
// 128 bits of SHA-256(K) in unpadded base64url (22 characters): key names
// hold no secret and have a fixed length. It
// depends on K only, so the same K has the same hash tag under every
// limiter (state for one client can be colocated on one Cluster node).

// keyDigestLen is the length of the digest of a key in its Redis name.
const keyDigestLen = 22

// policyFingerprint returns the 8 hex digits that name p's numbers in
// its Redis keys.
func policyFingerprint(code string, p ratelimit.Policy) string {
	refill := 0
	if p.Algorithm == ratelimit.TokenBucketAlgorithm {
		refill = p.Refill
	}
	sum := sha256.Sum256(fmt.Appendf(nil, "%s/%d/%d/%d", code, p.Limit, refill, p.Period/time.Microsecond))
	return hex.EncodeToString(sum[:4])
}

// keyHash returns SHA-256 of key without copying it.
func keyHash(key string) [sha256.Size]byte {
	return sha256.Sum256(unsafe.Slice(unsafe.StringData(key), len(key)))
}

// Key returns the Redis key that holds the state of key under the
// limiter's current policy: the prefix, the algorithm's code, the policy's
// fingerprint and, in braces (the Cluster hash tag), a digest of key, or
// key itself with [WithPlainKeys]. The key's block (see [Limiter.Block])
// is kept beside it in prefix + "blk:{" + digest + "}".
func (l *Limiter) Key(key string) string {
	var buf [keyDigestLen]byte
	return l.cur.Load().prefix + l.tag(key, &buf) + "}"
}

// digest writes the digest of key in its Redis names to buf.
func digest(key string, buf *[keyDigestLen]byte) {
	sum := keyHash(key)
	base64.RawURLEncoding.Encode(buf[:], sum[:16])
}

// keyDigest returns the digest of key that the errors of a [Limiter] show
// in place of the key ("sha256:" and 12 hex digits), so that an operator
// can match an error to a known key: keys may be API keys, and no error
// carries one.
func keyDigest(key string) string {
	sum := keyHash(key)
	return "sha256:" + hex.EncodeToString(sum[:6])
}
