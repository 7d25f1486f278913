package consensus

import (
	"io"
	"log"

	"github.com/hashicorp/go-hclog"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// hclogZap makes raft log through our zap logger. Raft's levels map onto
// zap's (trace onto debug); its key-value pairs become zap fields.
type hclogZap struct {
	z     *zap.SugaredLogger
	name  string
	args  []any
	level hclog.Level
}

func newHclog(z *zap.Logger, level hclog.Level) hclog.Logger {
	return &hclogZap{z: z.WithOptions(zap.AddCallerSkip(2)).Sugar(), level: level}
}

func (l *hclogZap) Log(level hclog.Level, msg string, args ...any) {
	if level < l.level || level == hclog.Off {
		return
	}
	switch level {
	case hclog.Trace, hclog.Debug:
		l.z.Debugw(msg, args...)
	case hclog.Info, hclog.NoLevel, hclog.DefaultLevel:
		l.z.Infow(msg, args...)
	case hclog.Warn:
		l.z.Warnw(msg, args...)
	default:
		l.z.Errorw(msg, args...)
	}
}

func (l *hclogZap) Trace(msg string, args ...any) { l.Log(hclog.Trace, msg, args...) }
func (l *hclogZap) Debug(msg string, args ...any) { l.Log(hclog.Debug, msg, args...) }
func (l *hclogZap) Info(msg string, args ...any)  { l.Log(hclog.Info, msg, args...) }
func (l *hclogZap) Warn(msg string, args ...any)  { l.Log(hclog.Warn, msg, args...) }
func (l *hclogZap) Error(msg string, args ...any) { l.Log(hclog.Error, msg, args...) }

func (l *hclogZap) IsTrace() bool { return l.level <= hclog.Trace }
func (l *hclogZap) IsDebug() bool {
	return l.level <= hclog.Debug && l.z.Desugar().Core().Enabled(zapcore.DebugLevel)
}
func (l *hclogZap) IsInfo() bool  { return l.level <= hclog.Info }
func (l *hclogZap) IsWarn() bool  { return l.level <= hclog.Warn }
func (l *hclogZap) IsError() bool { return l.level <= hclog.Error }

func (l *hclogZap) ImpliedArgs() []any { return l.args }

func (l *hclogZap) With(args ...any) hclog.Logger {
	c := *l
	c.args = append(append([]any(nil), l.args...), args...)
	c.z = l.z.With(args...)
	return &c
}

func (l *hclogZap) Name() string { return l.name }

func (l *hclogZap) Named(name string) hclog.Logger {
	c := *l
	if c.name != "" {
		name = c.name + "." + name
	}
	c.name = name
	c.z = l.z.Named(name)
	return &c
}

func (l *hclogZap) ResetNamed(name string) hclog.Logger {
	c := *l
	c.name = name
	c.z = l.z.Named(name)
	return &c
}

func (l *hclogZap) SetLevel(level hclog.Level) { l.level = level }
func (l *hclogZap) GetLevel() hclog.Level      { return l.level }

func (l *hclogZap) StandardLogger(opts *hclog.StandardLoggerOptions) *log.Logger {
	return log.New(l.StandardWriter(opts), "", 0)
}

func (l *hclogZap) StandardWriter(*hclog.StandardLoggerOptions) io.Writer {
	return zapWriter{l}
}

type zapWriter struct{ l *hclogZap }

func (w zapWriter) Write(p []byte) (int, error) {
	w.l.Info(string(p))
	return len(p), nil
}
