package launcher

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strconv"
	"syscall"
	"time"

	"github.com/gorun-dev/gorun/internal/sys/private"
	"github.com/gorun-dev/gorun/internal/workerenv"
)

// ErrorReport is what a worker wrote to its TORCHELASTIC_ERROR_FILE, as
// PyTorch's @record decorator writes it.
type ErrorReport struct {
	// Message is the exception, e.g. "RuntimeError: boom".
	Message string `json:"message"`
	// Traceback is the Python call stack, if any.
	Traceback string `json:"traceback,omitempty"`
	// Time is when the worker wrote the file; zero if it did not say.
	Time time.Time `json:"time,omitzero"`
}

// maxErrorFile bounds how much of an error file is read.
const maxErrorFile = 4 << 20

// ReadErrorFile reads a worker's error file. A missing file gives nil and
// no error: a worker that did not use @record, or was killed, writes none.
// Both of PyTorch's layouts are accepted:
//
//	{"message": {"message": "...", "extraInfo": {"py_callstack": "...", "timestamp": "..."}}}
//	{"message": "...", "timestamp": 1700000000}
func ReadErrorFile(path string) (*ErrorReport, error) {
	if path == "" {
		return nil, nil
	}
	data, err := readWorkerFile(path, maxErrorFile)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read error file: %w", err)
	}
	if len(data) > maxErrorFile {
		data = data[:maxErrorFile]
	}
	var top struct {
		Message   json.RawMessage `json:"message"`
		Timestamp json.RawMessage `json:"timestamp"`
	}
	if err := json.Unmarshal(data, &top); err != nil {
		return nil, fmt.Errorf("error file %s is not PyTorch's error JSON: %w", path, err)
	}
	rep := &ErrorReport{}
	var msg string
	if json.Unmarshal(top.Message, &msg) == nil {
		rep.Message = msg
		rep.Time = unixTime(top.Timestamp)
		return rep, nil
	}
	var nested struct {
		Message   string `json:"message"`
		ExtraInfo struct {
			PyCallstack string          `json:"py_callstack"`
			Timestamp   json.RawMessage `json:"timestamp"`
		} `json:"extraInfo"`
	}
	if err := json.Unmarshal(top.Message, &nested); err != nil {
		return nil, fmt.Errorf("error file %s: \"message\" is neither a string nor an object: %w", path, err)
	}
	rep.Message = nested.Message
	rep.Traceback = nested.ExtraInfo.PyCallstack
	rep.Time = unixTime(nested.ExtraInfo.Timestamp)
	return rep, nil
}

// readWorkerFile reads a file that a worker wrote, by its path: not
// through a link at the path, without blocking on a FIFO or a device
// (anything but a regular file is refused), and at most limit+1 bytes,
// so that a larger file is known to be one without being read whole.
func readWorkerFile(path string, limit int64) ([]byte, error) {
	f, _, err := private.OpenRegular(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, limit+1))
}

// unixTime reads a timestamp in seconds given as a JSON number or string.
func unixTime(raw json.RawMessage) time.Time {
	if len(raw) == 0 {
		return time.Time{}
	}
	var s string
	if json.Unmarshal(raw, &s) != nil {
		s = string(raw)
	}
	sec, err := strconv.ParseInt(s, 10, 64)
	if err != nil || sec <= 0 {
		return time.Time{}
	}
	return time.Unix(sec, 0)
}

// writeRootCause copies the root cause's error file (the first failed
// worker's) to the file the launcher's own TORCHELASTIC_ERROR_FILE names,
// as torchrun's @record does: platforms collect a job's failures there.
// As torchrun, the exit code goes into the message's "errorCode" (a
// worker killed by a signal cannot write it), and nothing is written when
// the worker left no error file or the variable is unset.
func writeRootCause(environ []string, f Failure) error {
	dst, ok := lookupEnv(environ, workerenv.ErrorFile)
	if !ok || dst == "" || f.errorFile == "" {
		return nil
	}
	data, err := readWorkerFile(f.errorFile, maxErrorFile)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil || len(data) > maxErrorFile {
		return fmt.Errorf("%s=%s: the root cause's error file %s: %v", workerenv.ErrorFile, dst, f.errorFile, err)
	}
	var doc map[string]any
	if err := json.Unmarshal(data, &doc); err != nil {
		return fmt.Errorf("%s=%s: the root cause's error file %s is not JSON: %v", workerenv.ErrorFile, dst, f.errorFile, err)
	}
	if msg, ok := doc["message"].(map[string]any); ok && f.ExitCode != 0 {
		msg["errorCode"] = f.ExitCode
	}
	out, err := json.Marshal(doc)
	if err != nil {
		return err
	}
	// A file already there (an earlier run's) is replaced, never
	// written through.
	if err := os.Remove(dst); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%s=%s: %w", workerenv.ErrorFile, dst, err)
	}
	fd, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, fileMode)
	if err != nil {
		return fmt.Errorf("%s=%s: %w", workerenv.ErrorFile, dst, err)
	}
	_, err = fd.Write(out)
	if cerr := fd.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("%s=%s: %w", workerenv.ErrorFile, dst, err)
	}
	return nil
}
