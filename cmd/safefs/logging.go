package main

import (
	"fmt"
	"io"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// newLogger builds the logger handed to fs as Options.Log. It writes to w
// (stderr) only; there is no global logger.
func newLogger(format, level string, w io.Writer) (*zap.Logger, error) {
	lvl, err := parseLevel(level)
	if err != nil {
		return nil, err
	}
	enc, err := newEncoder(format)
	if err != nil {
		return nil, err
	}
	out := zapcore.Lock(zapcore.AddSync(w))
	return zap.New(zapcore.NewCore(enc, out, lvl), zap.ErrorOutput(out)), nil
}

func newEncoder(format string) (zapcore.Encoder, error) {
	cfg := zap.NewProductionEncoderConfig()
	cfg.EncodeTime = zapcore.ISO8601TimeEncoder
	switch format {
	case "console":
		cfg.EncodeLevel = zapcore.CapitalLevelEncoder
		return zapcore.NewConsoleEncoder(cfg), nil
	case "json":
		return zapcore.NewJSONEncoder(cfg), nil
	}
	return nil, fmt.Errorf("want console or json")
}

// parseLevel accepts only the four levels we document; zap's own parser
// also takes panic and fatal, which make no sense here.
func parseLevel(level string) (zapcore.Level, error) {
	switch level {
	case "debug":
		return zapcore.DebugLevel, nil
	case "info":
		return zapcore.InfoLevel, nil
	case "warn":
		return zapcore.WarnLevel, nil
	case "error":
		return zapcore.ErrorLevel, nil
	}
	return zapcore.InfoLevel, fmt.Errorf("want debug, info, warn or error")
}
