package cmdline

import (
	"fmt"
	"io"
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
