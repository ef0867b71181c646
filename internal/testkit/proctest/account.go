package proctest

import (
	"errors"
	"os"
	"os/exec"
	"os/user"
	"strconv"
	"syscall"
	"testing"
)

// OtherUserName is the local account that tests use as another user of
// the machine (an attacker): created by OtherUser when missing.
const OtherUserName = "gorun-test-other"

// OtherUser returns the credential of a second local account, creating
// it (a system account, no home, no login) when missing. It skips the
// test, loudly, where that is not possible (not root, no useradd).
func OtherUser(t testing.TB) *syscall.Credential {
	t.Helper()
	if os.Getuid() != 0 {
		t.Skip("SKIPPED: a second local account needs root to create it and to run as it")
	}
	u, err := user.Lookup(OtherUserName)
	if err != nil {
		out, aerr := exec.Command("useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", OtherUserName).CombinedOutput()
		// Another test package may have created it meanwhile.
		if u, err = user.Lookup(OtherUserName); err != nil {
			t.Skipf("SKIPPED: no second local account: useradd %s: %v %s", OtherUserName, errors.Join(aerr, err), out)
		}
	}
	uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
	gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
	if err := errors.Join(err1, err2); err != nil {
		t.Fatalf("account %s: %v", OtherUserName, err)
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
}
