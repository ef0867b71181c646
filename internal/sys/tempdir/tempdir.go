// Package tempdir makes gorun's private temporary folders and sweeps the
// ones that killed gorun processes left behind.
package tempdir

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/gorun-dev/gorun/internal/sys/private"
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
	lock *private.Folder // the folder itself, flock'ed
}

// New makes a Dir named gorun-<what>-* in the temporary folder.
func New(what string) (*Dir, error) { return Make("", Prefix+what+"-") }

// Make makes a private folder pattern* (os.MkdirTemp's pattern, which
// must begin with Prefix) in dir ("": the temporary folder) and locks it.
func Make(dir, pattern string) (*Dir, error) {
	if err := sharedSafely(cmp.Or(dir, os.TempDir())); err != nil {
		return nil, err
	}
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

// sharedSafely refuses a folder in which another user could rename or
// remove a folder of this user's: one of another user's (root aside), or
// one others may write without the sticky bit (/tmp has it). A private
// folder made there could be swapped for theirs while gorun uses it.
func sharedSafely(dir string) error {
	fi, err := os.Stat(dir)
	if err != nil {
		return err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	switch {
	case !ok:
	case int(st.Uid) != os.Getuid() && st.Uid != 0:
		return fmt.Errorf("temporary folder %s ($TMPDIR) belongs to %s, who could swap gorun's private folders in it: set TMPDIR to a folder of yours, or one with the sticky bit (as /tmp)", dir, private.UserName(int(st.Uid)))
	case fi.Mode().Perm()&0o022 != 0 && fi.Mode()&os.ModeSticky == 0:
		return fmt.Errorf("temporary folder %s ($TMPDIR) has mode %04o without the sticky bit: other users could swap gorun's private folders in it; set TMPDIR to a folder only you can write to, or one with the sticky bit (as /tmp)", dir, fi.Mode().Perm())
	}
	return nil
}

// lockNewDir locks the folder this process just made, then marks it.
// The folder is opened without following a link and checked to be this
// user's alone; the mark is made through that handle.
func lockNewDir(path string) (*Dir, error) {
	lock, err := private.OpenOwnFolder(path)
	if err != nil {
		return nil, err
	}
	if err := flock(lock.File(), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		lock.Close()
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	fd, err := unix.Openat(int(lock.File().Fd()), ownerFile, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err == nil {
		f := os.NewFile(uintptr(fd), filepath.Join(path, ownerFile))
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

// Remove deletes the folder and then drops its lock. What it holds is
// removed through the handle this process made it with, never followed
// through a link; the folder itself goes only once empty.
func (d *Dir) Remove() error {
	err := d.lock.RemoveContents()
	if err == nil {
		if err = syscall.Rmdir(d.path); errors.Is(err, fs.ErrNotExist) {
			err = nil
		}
	}
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
	parent, err := private.OpenFolder(dir)
	if err != nil {
		return nil, err
	}
	defer parent.Close()
	entries, err := parent.Entries()
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
		ok, err := sweepOne(parent, e.Name())
		if err != nil {
			errs = append(errs, err)
		}
		if ok {
			removed = append(removed, filepath.Join(dir, e.Name()))
		}
	}
	return removed, errors.Join(errs...)
}

// sweepOne removes name in parent if it is an abandoned folder of this
// user's, and says whether it did. It opens the folder without following
// a link, checks and locks that handle, and empties the folder through
// it: what it removes is the folder it checked, whatever the path
// meanwhile leads to.
func sweepOne(parent *private.Folder, name string) (bool, error) {
	if st, err := parent.Lstat(name); err != nil || st.Mode&syscall.S_IFMT != syscall.S_IFDIR {
		return false, nil
	}
	d, err := parent.Sub(name)
	if err != nil {
		return false, nil // gone, a link, or not this user's alone
	}
	defer d.Close() // drops the lock, after the removal
	if st, err := d.Lstat(ownerFile); err != nil || st.Mode&syscall.S_IFMT != syscall.S_IFREG {
		return false, nil // in the making, or not a locked folder
	}
	if err := flock(d.File(), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		return false, nil // a live gorun holds it (EWOULDBLOCK)
	}
	// Another sweeper may have removed it while this one waited for the
	// folder: then the owner file is gone too.
	if _, err := d.Lstat(ownerFile); err != nil {
		return false, nil
	}
	if err := d.RemoveContents(); err != nil {
		return false, fmt.Errorf("remove the abandoned %s: %w", d.Path(), err)
	}
	if err := parent.RemoveEmpty(name); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return false, fmt.Errorf("remove the abandoned %s: %w", d.Path(), err)
	}
	return true, nil
}
