package redact

import (
	"context"
	"fmt"
	"log/slog"
)

// Handler is h with every log line's message and values passed through
// Text first: a line that quotes a URI or DSN (an error from an opener
// or a driver, a value a caller sent) shows it masked, whoever logs it.
func Handler(h slog.Handler) slog.Handler {
	if _, ok := h.(handler); ok {
		return h
	}
	return handler{h}
}

type handler struct{ next slog.Handler }

func (h handler) Enabled(ctx context.Context, l slog.Level) bool { return h.next.Enabled(ctx, l) }

func (h handler) Handle(ctx context.Context, r slog.Record) error {
	out := slog.NewRecord(r.Time, r.Level, Text(r.Message), r.PC)
	r.Attrs(func(a slog.Attr) bool {
		out.AddAttrs(attr(a))
		return true
	})
	return h.next.Handle(ctx, out)
}

func (h handler) WithAttrs(as []slog.Attr) slog.Handler {
	masked := make([]slog.Attr, len(as))
	for i, a := range as {
		masked[i] = attr(a)
	}
	return handler{h.next.WithAttrs(masked)}
}

func (h handler) WithGroup(name string) slog.Handler { return handler{h.next.WithGroup(name)} }

// attr masks a string or an error value, and a group's members.
func attr(a slog.Attr) slog.Attr {
	switch v := a.Value.Resolve(); v.Kind() {
	case slog.KindString:
		a.Value = slog.StringValue(Text(v.String()))
	case slog.KindGroup:
		members := v.Group()
		masked := make([]slog.Attr, len(members))
		for i, m := range members {
			masked[i] = attr(m)
		}
		a.Value = slog.GroupValue(masked...)
	case slog.KindAny:
		switch x := v.Any().(type) {
		case error:
			a.Value = slog.StringValue(Text(x.Error()))
		case fmt.Stringer:
			a.Value = slog.StringValue(Text(x.String()))
		}
	default:
		a.Value = v
	}
	return a
}
