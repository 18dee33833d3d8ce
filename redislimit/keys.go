package redislimit

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"strconv"
	"time"
	"unsafe"

	"github.com/rlkit/ratelimit"
)

// Every Redis key name is built here. The state of key K lives in
//
//	prefix + code + ":" + policy fingerprint + ":{" + digest(K) + "}"
//
// The fingerprint (8 hex digits of SHA-256 over the algorithm and its
// numbers) keeps limiters with different policies apart, so a policy
// change starts fresh instead of reading state written under other
// numbers; a change back to a policy that a previous one shares the
// fingerprint with adds a salt to it (see salted). The digest is the first
// 128 bits of SHA-256(K) in unpadded base64url (22 characters): key names
// hold no secret and have a fixed length. It depends on K only, so the
// same K has the same hash tag under every limiter (state for one client
// can be colocated on one Cluster node). The client's block is kept in
// prefix + "blk:{" + digest(K) + "}", independent of the policy; with
// [WithPlainKeys] K itself takes the digest's place. The permits of a
// [Concurrency] of limit L for K are in prefix + "cc:" + L + ":{" +
// digest(K) + "}" (see Concurrency.key).

// quotaFingerprint returns the 8 hex digits that name a quota policy in
// its Redis keys: the limit and the calendar's normalized description
// (unit, reset time, week start or month day, zone name), which differs
// between calendars with different periods and is equal for calendars with
// the same ones (a nil Location and UTC, MonthDay 0 and 1).
func quotaFingerprint(p ratelimit.Policy) string {
	sum := sha256.Sum256(fmt.Appendf(nil, "cq/%d/%v", p.Limit, p.Calendar))
	return hex.EncodeToString(sum[:4])
}

// naturalPrefix returns the key-name prefix of the state under policy p,
// without a salt.
func (l *Limiter) naturalPrefix(code string, p ratelimit.Policy) string {
	fp := ""
	if p.Algorithm == ratelimit.QuotaAlgorithm {
		fp = quotaFingerprint(p)
	} else {
		fp = policyFingerprint(code, p)
	}
	return l.base + code + ":" + fp + ":{"
}

// salted returns the salt and prefix of a policy whose natural prefix is
// natural, after the previous policies prev and the names fs forgotten
// before their states were idle. A change back to a policy that a
// previous one still holds state under (or to the same policy) must not
// read that state as its own: in memory, and so here, that state converts
// step by step like any other (a sliding log is re-timed, StartFresh
// forgets it), and state under a policy more than keptPolicies changes
// back is forgotten. So the key names take a salt then, one more than the
// largest salt of a previous or forgotten policy with the same natural
// name: "tb:53a22938.1:{". It depends only on the previous policies, so a
// process given them by WithPrevious names the keys as one that went
// through the changes with SetPolicy.
func salted(natural string, prev []link, fs []forgotten) (int, string) {
	salt := -1
	for _, lk := range prev {
		if lk.natural == natural {
			salt = max(salt, lk.salt)
		}
	}
	for _, f := range fs {
		if f.natural == natural {
			salt = max(salt, f.salt)
		}
	}
	if salt < 0 {
		return 0, natural
	}
	salt++
	return salt, natural[:len(natural)-2] + "." + strconv.Itoa(salt) + ":{"
}

// keyNames returns the key names of a client's keys up to its hash tag,
// in the scripts' KEYS order: its state under the policy whose prefix is
// prefix, its block, its state under each previous policy; and their
// total length.
func (l *Limiter) keyNames(prefix string, prev []link) ([]string, int) {
	names := make([]string, 0, 2+len(prev))
	names = append(names, prefix, l.base+blockInfix)
	for _, lk := range prev {
		names = append(names, lk.prefix)
	}
	n := 0
	for _, name := range names {
		n += len(name)
	}
	return names, n
}

// tag returns the hash tag of key's names: its digest, or key itself with
// WithPlainKeys, without the braces.
func (l *Limiter) tag(key string, buf *[keyDigestLen]byte) string {
	if l.plain {
		return key
	}
	digest(key, buf)
	return unsafe.String(&buf[0], keyDigestLen)
}

// keys returns the names of key's state under g's policy, of its block and
// of its state under the previous policies, in that order (the scripts'
// KEYS), all with one hash tag, in one allocation.
func (g *generation) keys(l *Limiter, key string) []string {
	var buf [keyDigestLen]byte
	tag := l.tag(key, &buf)
	b := make([]byte, 0, g.namesLen+len(g.names)*(len(tag)+1))
	keys := make([]string, len(g.names))
	for i, name := range g.names {
		start := len(b)
		b = append(b, name...)
		b = append(b, tag...)
		b = append(b, '}')
		keys[i] = unsafe.String(unsafe.SliceData(b[start:]), len(b)-start)
	}
	return keys
}

// blockInfix follows the prefix in the name of a block key, which is
// independent of the policy: prefix + "blk:{" + digest + "}".
const blockInfix = "blk:{"

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

// key returns the Redis key that holds key's permits: prefix + "cc:" +
// limit + ":{" + digest(key) + "}", or key itself in the braces with
// WithPlainKeys. One key per client key: its scripts touch one slot.
func (c *Concurrency) key(key string) string {
	var buf [keyDigestLen]byte
	tag := key
	if !c.plain {
		digest(key, &buf)
		tag = string(buf[:])
	}
	return c.base + tag + "}"
}
