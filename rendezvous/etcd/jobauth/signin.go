package jobauth

import (
	"context"
	"errors"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Signing in to the job's store. etcd's client logs in again (an
// Authenticate call: a bcrypt comparison on the store) each time it opens
// a stream, which every watch and every lease keep-alive of every node
// does: at 2,048 nodes that was most of the store's CPU during a round
// (docs/benchmarks.md). The job's stores issue signed tokens (JWT) good
// for SignInLife, and a node logs in once and hands its client the token
// it got (clientv3.Config.Token), which never logs in again.

// SignInKey is the key the members of a store of several sign their
// auth tokens with; a store of one member that no other joins signs with
// a random key of its own (jobstore's signedTokens).
func SignInKey(t Token) []byte { return t.Derive("gorun etcd jwt v1") }

// SignInLife is how long a token the job's store issues is good for. It
// grants what the job user's password grants, which the job token gives
// and which does not expire; the bound only keeps a token from being good
// for ever, far beyond any job.
const SignInLife = 10 * 365 * 24 * time.Hour

// SignIn logs in to the store of ccfg once, as ccfg's user, and returns
// the token the store issued, to give the store's clients instead of the
// password (clientv3.Config.Token). It returns "" when the store's tokens
// are not signed ones (a store of another gorun, or not gorun's, or one
// without authentication): log in with the password then.
func SignIn(ctx context.Context, ccfg clientv3.Config) (string, error) {
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
	if !isSigned(resp.Token) {
		return "", nil // etcd's simple tokens: one member's own, and short-lived
	}
	return resp.Token, nil
}

// isSigned says whether token is a signed one (JWT: three parts).
func isSigned(token string) bool { return strings.Count(token, ".") == 2 }
