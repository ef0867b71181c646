package cmdline

import (
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/sirupsen/logrus"
)

// lineFormatter prints gorun's own messages as "gorun: LEVEL: message",
// apart from the workers' prefixed lines.
type lineFormatter struct{}

// Format implements logrus.Formatter.
func (lineFormatter) Format(e *logrus.Entry) ([]byte, error) {
	level := ""
	switch e.Level {
	case logrus.InfoLevel:
	case logrus.WarnLevel:
		level = "warning: "
	default:
		level = e.Level.String() + ": "
	}
	return []byte("gorun: " + level + strings.TrimRight(e.Message, "\n") + "\n"), nil
}

// newLogger returns a logger for gorun's own messages at the named level.
func newLogger(level string, w io.Writer) (*logrus.Logger, error) {
	lvl, err := logrus.ParseLevel(strings.ToLower(level))
	if err != nil {
		return nil, fmt.Errorf("--log-level=%q: want debug, info, warning or error", level)
	}
	log := logrus.New()
	log.SetOutput(w)
	log.SetLevel(lvl)
	log.SetFormatter(lineFormatter{})
	return log, nil
}

// pythonLogLevelEnv is the variable torchrun (and much Python code) takes
// its log level from. It is meant for the application as much as for the
// launcher, so a value gorun cannot read never stops a job.
const pythonLogLevelEnv = "LOGLEVEL"

// levelFromPython reads a LOGLEVEL value, a Python logging level name
// (CRITICAL, FATAL, ERROR, WARN, WARNING, INFO, DEBUG, NOTSET, any case)
// or number, as one of gorun's levels; def when it is empty. A value it
// cannot read gives def and a note saying so.
func levelFromPython(v, def string) (level, note string) {
	v = strings.TrimSpace(v)
	if v == "" {
		return def, ""
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		named := map[string]int{"CRITICAL": 50, "FATAL": 50, "ERROR": 40, "WARN": 30, "WARNING": 30, "INFO": 20, "DEBUG": 10, "NOTSET": 0}
		var ok bool
		if n, ok = named[strings.ToUpper(v)]; !ok {
			return def, fmt.Sprintf("%s=%q is not a Python log level (CRITICAL, ERROR, WARNING, INFO, DEBUG, NOTSET or a number): gorun logs at %s (--log-level sets it)", pythonLogLevelEnv, v, def)
		}
	}
	// gorun's highest level is error: CRITICAL and FATAL keep its errors.
	switch {
	case n <= 10:
		return "debug", ""
	case n <= 20:
		return "info", ""
	case n <= 30:
		return "warning", ""
	}
	return "error", ""
}
