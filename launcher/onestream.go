package launcher

import (
	"io"
	"os"
	"syscall"
)

// One pipe for a worker's two streams. A worker's stdout and stderr are
// two pipes to gorun, read apart: a line printed just before a traceback
// can reach the console after it. Where gorun's own stdout and stderr are
// one file (a terminal, `> log 2>&1`, `2>&1 | tee`), the worker's two
// streams have only one place to go anyway, as they do under torchrun,
// whose workers write to it directly: each worker then gets one pipe for
// both, and its lines keep the order it wrote them in. Not for a rank
// whose output also goes to files (--redirects, --tee: a file per stream),
// nor where gorun's two streams are apart (a user who reads stderr alone
// gets the workers' stderr alone). The failure summary's tail of the
// worker's errors then holds its stdout too.

// sameOutput says whether stdout and stderr are one file: the same
// writer, or files whose descriptors name the same file.
func sameOutput(stdout, stderr io.Writer) bool {
	if stdout == stderr {
		return true
	}
	a, ok1 := stdout.(*os.File)
	b, ok2 := stderr.(*os.File)
	if !ok1 || !ok2 {
		return false
	}
	var sa, sb syscall.Stat_t
	if syscall.Fstat(int(a.Fd()), &sa) != nil || syscall.Fstat(int(b.Fd()), &sb) != nil {
		return false
	}
	return sa.Dev == sb.Dev && sa.Ino == sb.Ino && sa.Rdev == sb.Rdev
}

// mergesStreams says whether local rank lr's stdout and stderr share one
// pipe (see above).
func (cfg *Config) mergesStreams(lr int) bool {
	return cfg.oneConsole && cfg.Redirects.For(lr) == 0 && cfg.Tee.For(lr) == 0
}
