// Package tempdir makes gorun's private temporary folders and sweeps the
// ones that killed gorun processes left behind.
package tempdir

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// Every folder gorun makes in the temporary folder
// ($TMPDIR, else /tmp) is private (mode 0700, made by os.MkdirTemp, so a
// folder or link planted under the same name is never used) and named
// gorun-*. A folder that gorun removes when it ends (the error files of
// a run without --log-dir, the --standalone store's data) also holds an
// owner file, and the gorun that made it keeps the folder flock'ed while
// it lives. A gorun killed with SIGKILL cannot remove its folders, but
// the kernel drops its lock: the next gorun of the same user sweeps every
// such folder whose lock it can take.

// Prefix begins the name of every temporary folder gorun makes.
const Prefix = "gorun-"

// ownerFile marks a folder that a live gorun holds locked; it holds that
// gorun's pid, for an operator. It is written after the lock is taken,
// so a folder with an owner file and a free lock belongs to no one.
const ownerFile = ".gorun-owner"

// Dir is a private temporary folder (mode 0700) that this process
// removes when done and holds locked until then: if the process is
// killed first, the next gorun of the same user sweeps it.
type Dir struct {
	path string
	lock *os.File // the folder itself, flock'ed
}

// New makes a Dir named gorun-<what>-* in the temporary folder.
func New(what string) (*Dir, error) { return Make("", Prefix+what+"-") }

// Make makes a private folder pattern* (os.MkdirTemp's pattern, which
// must begin with Prefix) in dir ("": the temporary folder) and locks it.
func Make(dir, pattern string) (*Dir, error) {
	path, err := os.MkdirTemp(dir, pattern)
	if err != nil {
		return nil, err
	}
	d, err := lockNewDir(path)
	if err != nil {
		os.RemoveAll(path)
		return nil, err
	}
	return d, nil
}

// lockNewDir locks the folder this process just made, then marks it.
func lockNewDir(path string) (*Dir, error) {
	lock, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	if err := flock(lock, syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		lock.Close()
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	f, err := os.OpenFile(filepath.Join(path, ownerFile), os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o600)
	if err == nil {
		_, err = f.WriteString(strconv.Itoa(os.Getpid()) + "\n")
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		lock.Close()
		return nil, fmt.Errorf("mark %s: %w", path, err)
	}
	return &Dir{path: path, lock: lock}, nil
}

// Path is the folder's path.
func (d *Dir) Path() string { return d.path }

// Remove deletes the folder and then drops its lock.
func (d *Dir) Remove() error {
	err := os.RemoveAll(d.path)
	if cerr := d.lock.Close(); err == nil {
		err = cerr
	}
	return err
}

// flock applies how (syscall.LOCK_*) to f.
func flock(f *os.File, how int) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var ferr error
	if err := rc.Control(func(fd uintptr) {
		for {
			ferr = syscall.Flock(int(fd), how)
			if !errors.Is(ferr, syscall.EINTR) {
				return
			}
		}
	}); err != nil {
		return err
	}
	return ferr
}

// Sweep removes the folders in dir that gorun processes of this
// user left when they were killed: gorun-* folders owned by this user,
// with an owner file, whose lock can be taken (the holder is dead). A
// live gorun's folders (this one's included) are locked, and a folder
// without an owner file (in the making, or not a locked one) is left
// alone. It returns the folders removed; ctx stops it between folders.
func Sweep(ctx context.Context, dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var removed []string
	var errs []error
	for _, e := range entries {
		if ctx.Err() != nil {
			return removed, ctx.Err()
		}
		// A link's type is not a folder's: links are never followed.
		if !e.IsDir() || !strings.HasPrefix(e.Name(), Prefix) {
			continue
		}
		path := filepath.Join(dir, e.Name())
		ok, err := sweepOne(path)
		if err != nil {
			errs = append(errs, err)
		}
		if ok {
			removed = append(removed, path)
		}
	}
	return removed, errors.Join(errs...)
}

// sweepOne removes path if it is an abandoned folder of this user's, and
// says whether it did.
func sweepOne(path string) (bool, error) {
	if fi, err := os.Lstat(filepath.Join(path, ownerFile)); err != nil || !fi.Mode().IsRegular() {
		return false, nil
	}
	fd, err := syscall.Open(path, syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0)
	if err != nil {
		return false, nil // gone, or not a folder any more
	}
	lock := os.NewFile(uintptr(fd), path)
	defer lock.Close() // drops the lock, after the removal
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil || int(st.Uid) != os.Getuid() {
		return false, nil
	}
	if err := flock(lock, syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		return false, nil // a live gorun holds it (EWOULDBLOCK)
	}
	// Another sweeper may have removed it while this one waited for the
	// folder: then the owner file is gone too.
	if _, err := os.Lstat(filepath.Join(path, ownerFile)); err != nil {
		return false, nil
	}
	if err := os.RemoveAll(path); err != nil {
		return false, fmt.Errorf("remove the abandoned %s: %w", path, err)
	}
	return true, nil
}
