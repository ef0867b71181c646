package slurmtest

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"syscall"
)

// hostsFile is the machine's name table, where the cluster's host names go
// so that every process (srun, slurmd, gorun, getent) resolves them.
const hostsFile = "/etc/hosts"

func hostsBegin(tag string) string { return "# BEGIN gorun slurmtest " + tag }
func hostsEnd(tag string) string   { return "# END gorun slurmtest " + tag }

// addHostsBlock appends a block of "address name" lines marked with tag to
// the hosts file at path, replacing an earlier block with the same tag.
func addHostsBlock(path, tag string, entries [][2]string) error {
	return editHosts(path, func(lines []string) ([]string, error) {
		lines, err := dropBlock(lines, tag)
		if err != nil {
			return nil, err
		}
		lines = append(lines, hostsBegin(tag))
		for _, e := range entries {
			lines = append(lines, e[0]+" "+e[1])
		}
		return append(lines, hostsEnd(tag)), nil
	})
}

// removeHostsBlock removes the block marked with tag from the hosts file
// at path, and nothing else; removing a block that is not there is not an
// error.
func removeHostsBlock(path, tag string) error {
	return editHosts(path, func(lines []string) ([]string, error) { return dropBlock(lines, tag) })
}

// dropBlock returns lines without the block marked with tag. A begin
// marker without its end marker is an error: the lines after it may be
// somebody else's.
func dropBlock(lines []string, tag string) ([]string, error) {
	begin, end := -1, -1
	for i, l := range lines {
		switch strings.TrimSpace(l) {
		case hostsBegin(tag):
			if begin < 0 {
				begin = i
			}
		case hostsEnd(tag):
			if begin >= 0 && end < 0 {
				end = i
			}
		}
	}
	if begin < 0 {
		return lines, nil
	}
	if end < 0 {
		return nil, fmt.Errorf("%q without %q: left as it is", hostsBegin(tag), hostsEnd(tag))
	}
	return append(lines[:begin:begin], lines[end+1:]...), nil
}

// editHosts rewrites the hosts file at path with edit, holding an
// exclusive flock on it so that clusters started at the same time do not
// lose each other's blocks. It writes in place (the same inode), which
// also works where the file is a bind mount.
func editHosts(path string, edit func([]string) ([]string, error)) error {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		return fmt.Errorf("lock %s: %w", path, err)
	}
	data, err := io.ReadAll(f)
	if err != nil {
		return err
	}
	text := strings.TrimSuffix(string(data), "\n")
	var lines []string
	if text != "" {
		lines = strings.Split(text, "\n")
	}
	out, err := edit(lines)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	newText := strings.Join(out, "\n")
	if len(out) > 0 {
		newText += "\n"
	}
	if newText == string(data) {
		return nil
	}
	if err := f.Truncate(0); err != nil {
		return err
	}
	if _, err := f.WriteAt([]byte(newText), 0); err != nil {
		return errors.Join(fmt.Errorf("rewrite %s", path), err)
	}
	return f.Sync()
}
