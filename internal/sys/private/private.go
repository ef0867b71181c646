// Package private keeps what is this user's to this user: it makes and
// checks files and folders that only this user may use, in places other
// users can write too (the temporary folder: anything another user
// planted there, a folder or a link, is refused), and it hides this
// process's secrets from the other processes of the same user, its
// workers included (HideSecrets).
package private

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
)

// Dir makes path a folder private to this user (mode 0700), or
// checks that the one already there is: a folder, not a link, owned by
// this user, that no other user may enter or write. Anything else is
// refused, so a folder or link planted by another user is never used.
func Dir(path string) error {
	if err := os.Mkdir(path, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	fi, err := os.Lstat(path)
	if err != nil {
		return err
	}
	st, _ := fi.Sys().(*syscall.Stat_t)
	switch {
	case fi.Mode()&fs.ModeSymlink != 0:
		return fmt.Errorf("%s is a symbolic link, not a folder", path)
	case !fi.IsDir():
		return fmt.Errorf("%s is not a folder", path)
	case st == nil || int(st.Uid) != os.Getuid():
		return fmt.Errorf("%s belongs to another user", path)
	case fi.Mode().Perm()&0o077 != 0:
		return fmt.Errorf("%s has mode %04o: other users may use it (want 0700)", path, fi.Mode().Perm())
	}
	return nil
}

// FlightRecorderBase is the per-user folder, in the temporary folder, of
// the flight-recorder dumps of runs that name no folder for them.
func FlightRecorderBase() string {
	return filepath.Join(os.TempDir(), "gorun-flight-recorder-"+strconv.Itoa(os.Getuid()))
}

// FlightRecorderDir is the per-user flight-recorder folder made private
// (Dir), or, when another user holds its name, a fresh private folder
// beside it; warning then says why.
func FlightRecorderDir() (dir, warning string, err error) {
	base := FlightRecorderBase()
	perr := Dir(base)
	if perr == nil {
		return base, "", nil
	}
	if base, err = os.MkdirTemp("", filepath.Base(base)+"-"); err != nil {
		return "", "", err
	}
	return base, fmt.Sprintf("flight recorder: not using %v; dumps go to %s", perr, base), nil
}

// ErrNotRegular: a path that should be a regular file is something else
// (a FIFO, a device, a folder).
var ErrNotRegular = errors.New("not a regular file")

// OpenRegular opens path for reading without following a link at it
// (the error is then syscall.ELOOP's) and without blocking on a FIFO, and
// returns it with its info once it is a regular file (else ErrNotRegular):
// for files another process may have planted or swapped.
func OpenRegular(path string) (*os.File, fs.FileInfo, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if errors.Is(err, syscall.ELOOP) {
		return nil, nil, fmt.Errorf("%s is a symbolic link: not followed (%w)", path, err)
	}
	if err != nil {
		return nil, nil, err
	}
	st, err := f.Stat()
	if err == nil && !st.Mode().IsRegular() {
		err = fmt.Errorf("%s: %w", path, ErrNotRegular)
	}
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	return f, st, nil
}
