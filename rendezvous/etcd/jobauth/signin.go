package jobauth

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Signing in to the job's store. etcd's client logs in again (an
// Authenticate call: a bcrypt comparison on the store) each time it opens
// a stream, which every watch and every lease keep-alive of every node
// does: at 2,048 nodes that was most of the store's CPU during a round
// (docs/benchmarks.md). The job's stores sign their tokens (JWT, HS256)
// with a key every node derives from the job token (SignInKey): a node
// logs in once, to learn the store's auth revision, which a token must
// name, then signs its own token and hands it to its client, which never
// logs in again.

// SignInKey is the key the job's store signs its auth tokens with.
func SignInKey(t Token) []byte { return t.Derive("gorun etcd jwt v1") }

// signedTokenLife bounds a token a node signs. It grants what the job
// token grants, and the job token does not expire; the bound keeps a
// token from being good for ever, far beyond any job.
const signedTokenLife = 10 * 365 * 24 * time.Hour

// SignIn logs in to the store of ccfg once, as ccfg's user, and returns
// a token signed with the job token's key for ccfg's user, to give the
// store's clients instead of the password (clientv3.Config.Token). It
// returns "" when the store's tokens are not signed ones (a store of
// another gorun, or not gorun's): log in with the password then.
func SignIn(ctx context.Context, ccfg clientv3.Config, token Token) (string, error) {
	user, password := ccfg.Username, ccfg.Password
	ccfg.Username, ccfg.Password = "", ""
	bare, err := clientv3.New(ccfg)
	if err != nil {
		return "", err
	}
	defer bare.Close()
	resp, err := bare.Auth.Authenticate(ctx, user, password)
	if errors.Is(err, rpctypes.ErrAuthNotEnabled) {
		return "", nil // the password client copes: it sends no token
	}
	if err != nil {
		return "", err
	}
	rev, ok := tokenRevision(resp.Token)
	if !ok {
		return "", nil
	}
	return signToken(SignInKey(token), user, rev, time.Now().Add(signedTokenLife))
}

// signToken is the token etcd gives user at auth revision rev, signed
// with key (HS256), good until exp.
func signToken(key []byte, user string, rev uint64, exp time.Time) (string, error) {
	claims, err := json.Marshal(struct {
		Username string `json:"username"`
		Revision uint64 `json:"revision"`
		Exp      int64  `json:"exp"`
	}{user, rev, exp.Unix()})
	if err != nil {
		return "", fmt.Errorf("sign in to the store: %w", err)
	}
	enc := base64.RawURLEncoding
	body := enc.EncodeToString([]byte(`{"alg":"HS256","typ":"JWT"}`)) + "." + enc.EncodeToString(claims)
	m := hmac.New(sha256.New, key)
	m.Write([]byte(body))
	return body + "." + enc.EncodeToString(m.Sum(nil)), nil
}

// tokenRevision reads the auth revision a signed token (JWT) names; ok
// is false for a token that is not one.
func tokenRevision(token string) (rev uint64, ok bool) {
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return 0, false
	}
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return 0, false
	}
	var c struct {
		Revision *uint64 `json:"revision"`
	}
	if err := json.Unmarshal(payload, &c); err != nil || c.Revision == nil || *c.Revision == 0 {
		return 0, false
	}
	return *c.Revision, true
}
