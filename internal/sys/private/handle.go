package private

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Folder is a folder opened without following a link, on which gorun lists
// and removes through the handle (openat, unlinkat), never through a
// path that another user could turn into a link between a check and its
// use. A Folder opened by Sub is checked to be this user's (Own).
type Folder struct {
	f    *os.File
	path string // for messages only
}

// maxRemoveDepth bounds how deep RemoveContents goes: gorun's folders
// are a few levels deep; a deeper tree is left, with an error.
const maxRemoveDepth = 64

// OpenFolder opens the folder at path, refusing a link in its place (the
// folders above it are resolved as usual). It checks nothing of its
// owner: call Own for that.
func OpenFolder(path string) (*Folder, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: path, Err: linkError(err)}
	}
	return &Folder{f: os.NewFile(uintptr(fd), path), path: path}, nil
}

// OpenOwnFolder is OpenFolder and Own: the folder at path, if it is this
// user's and no other user may change what it holds.
func OpenOwnFolder(path string) (*Folder, error) {
	d, err := OpenFolder(path)
	if err != nil {
		return nil, err
	}
	if err := d.Own(); err != nil {
		d.Close()
		return nil, err
	}
	return d, nil
}

// linkError says that ELOOP or ENOTDIR of an open without following
// links means a link (or no folder) stood at the path.
func linkError(err error) error {
	if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR) {
		return fmt.Errorf("not a folder (a link or a file is in its place): %w", err)
	}
	return err
}

// Path is the path the folder was opened at.
func (d *Folder) Path() string { return d.path }

// File is the folder's handle, owned by d.
func (d *Folder) File() *os.File { return d.f }

// Close closes the handle.
func (d *Folder) Close() error { return d.f.Close() }

// Own checks that the folder is this user's and that no other user may
// create, rename or remove what it holds (no write bit for group or
// others): what it lists stays what this user put there.
func (d *Folder) Own() error {
	var st unix.Stat_t
	if err := unix.Fstat(int(d.f.Fd()), &st); err != nil {
		return &fs.PathError{Op: "stat", Path: d.path, Err: err}
	}
	return ownerError(d.path, &st)
}

// ownerError says why st, the folder at path, is not this user's alone.
func ownerError(path string, st *unix.Stat_t) error {
	switch perm := st.Mode & 0o7777; {
	case int(st.Uid) != os.Getuid():
		return fmt.Errorf("%s belongs to %s, not to you: gorun neither uses nor removes anything in it", path, UserName(int(st.Uid)))
	case perm&0o022 != 0:
		return fmt.Errorf("%s has mode %04o: other users may change what it holds, so gorun neither uses nor removes anything in it (chmod go-w it)", path, perm)
	}
	return nil
}

// component refuses a name that is not one entry of the folder.
func component(name string) error {
	if name == "" || name == "." || name == ".." || strings.ContainsRune(name, '/') {
		return fmt.Errorf("%q is not the name of an entry in a folder", name)
	}
	return nil
}

// Sub opens the folder name in d without following a link, and checks
// that it is this user's (Own).
func (d *Folder) Sub(name string) (*Folder, error) {
	if err := component(name); err != nil {
		return nil, err
	}
	path := filepath.Join(d.path, name)
	fd, err := unix.Openat(int(d.f.Fd()), name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: path, Err: linkError(err)}
	}
	s := &Folder{f: os.NewFile(uintptr(fd), path), path: path}
	if err := s.Own(); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// Entries lists what the folder holds, read through the handle.
func (d *Folder) Entries() ([]fs.DirEntry, error) {
	if _, err := d.f.Seek(0, 0); err != nil {
		return nil, err
	}
	return d.f.ReadDir(-1)
}

// Lstat is the entry name's info, a link's own.
func (d *Folder) Lstat(name string) (unix.Stat_t, error) {
	var st unix.Stat_t
	if err := component(name); err != nil {
		return st, err
	}
	err := unix.Fstatat(int(d.f.Fd()), name, &st, unix.AT_SYMLINK_NOFOLLOW)
	return st, err
}

// RemoveEmpty removes the folder name in d if it is empty; a file or a
// link of that name is never removed (rmdir's ENOTDIR).
func (d *Folder) RemoveEmpty(name string) error {
	if err := component(name); err != nil {
		return err
	}
	if err := unix.Unlinkat(int(d.f.Fd()), name, unix.AT_REMOVEDIR); err != nil {
		return &fs.PathError{Op: "remove", Path: filepath.Join(d.path, name), Err: err}
	}
	return nil
}

// RemoveAll removes the entry name in d and, for a folder of this
// user's, everything in it, through handles: a link is removed, never
// followed.
func (d *Folder) RemoveAll(name string) error {
	return d.removeAll(name, 0)
}

func (d *Folder) removeAll(name string, depth int) error {
	if err := component(name); err != nil {
		return err
	}
	st, err := d.Lstat(name)
	if errors.Is(err, unix.ENOENT) {
		return nil
	}
	if err != nil {
		return &fs.PathError{Op: "stat", Path: filepath.Join(d.path, name), Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		if err := unix.Unlinkat(int(d.f.Fd()), name, 0); err != nil && !errors.Is(err, unix.ENOENT) {
			return &fs.PathError{Op: "remove", Path: filepath.Join(d.path, name), Err: err}
		}
		return nil
	}
	s, err := d.Sub(name)
	if err != nil {
		return err
	}
	err = s.removeContents(depth + 1)
	s.Close()
	if err != nil {
		return err
	}
	if err := d.RemoveEmpty(name); err != nil && !errors.Is(err, unix.ENOENT) {
		return err
	}
	return nil
}

// RemoveContents removes everything in the folder, through handles,
// leaving the folder itself.
func (d *Folder) RemoveContents() error { return d.removeContents(0) }

func (d *Folder) removeContents(depth int) error {
	if depth > maxRemoveDepth {
		return fmt.Errorf("%s: more than %d folders deep; left in place", d.path, maxRemoveDepth)
	}
	entries, err := d.Entries()
	if err != nil {
		return &fs.PathError{Op: "read", Path: d.path, Err: err}
	}
	var errs []error
	for _, e := range entries {
		errs = append(errs, d.removeAll(e.Name(), depth))
	}
	return errors.Join(errs...)
}

// UserName is "user NAME (uid N)", or "uid N" for an unknown user.
func UserName(uid int) string {
	if u, err := user.LookupId(strconv.Itoa(uid)); err == nil {
		return fmt.Sprintf("user %s (uid %d)", u.Username, uid)
	}
	return fmt.Sprintf("uid %d", uid)
}

// MkdirAll makes the folders of path that are missing, each inside its
// parent through a handle and opened without following a link: a link
// or another user's folder that appears in the way between a check and
// the making (in a folder others may write to, as /tmp) is refused, not
// followed. The folders that exist already are resolved as usual; path
// should be one the caller resolved and checked (no links on it).
func MkdirAll(path string, mode uint32) error {
	path = filepath.Clean(path)
	existing, missing := path, []string(nil)
	for {
		if _, err := os.Lstat(existing); err == nil {
			break
		} else if !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		parent := filepath.Dir(existing)
		if parent == existing {
			return fmt.Errorf("%s: no part of it exists", path)
		}
		missing = append([]string{filepath.Base(existing)}, missing...)
		existing = parent
	}
	d, err := OpenFolder(existing)
	if err != nil {
		return err
	}
	defer func() { d.Close() }()
	for _, name := range missing {
		if err := unix.Mkdirat(int(d.f.Fd()), name, mode); err != nil && !errors.Is(err, unix.EEXIST) {
			return &fs.PathError{Op: "mkdir", Path: filepath.Join(d.path, name), Err: err}
		}
		sub, err := d.Sub(name) // a link or another user's folder is refused
		if err != nil {
			return err
		}
		d.Close()
		d = sub
	}
	return nil
}
