package api

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/stratanet/strata/engine"
)

// Converse is the loop of `strata chat`, apart from the terminal so that
// tests drive it with a reader and a writer.

// ConverseOptions shape a conversation.
type ConverseOptions struct {
	Model       string // "": the first model the server lists
	System      string // a system message to open with
	MaxTokens   int
	Temperature *float64
	Seed        *int64
	Profile     string // the scheduling profile ("": the node's default)
	// Prompt is written before each line read ("" for none, as when
	// stdin is not a terminal).
	Prompt string
	// Completion: each line is a prompt of its own for plain completion
	// (/v1/completions), for a model with no chat template (see
	// ModelEntry.PlainCompletion); the line is written back with its
	// continuation so that the text reads whole. There is no history,
	// and System is not used.
	Completion bool
}

// Converse reads user turns, one per line, from in and streams each
// reply to out as it arrives, keeping the conversation's history (or,
// with o.Completion, streams each line's continuation). Lines
// "/reset" (forget the history) and "/quit" are commands. A turn that
// fails is reported on out and left out of the history, so that the
// next line starts from where the conversation stood; Converse goes on
// until in ends, ctx ends, or out fails.
func Converse(ctx context.Context, c *Client, o ConverseOptions, in io.Reader, out io.Writer) error {
	if o.Model == "" {
		m, err := c.FirstModel(ctx)
		if err != nil {
			return err
		}
		o.Model = m
	}
	var history []engine.Message
	reset := func() {
		history = history[:0]
		if o.System != "" {
			history = append(history, engine.Message{Role: "system", Content: o.System})
		}
	}
	reset()
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for {
		if o.Prompt != "" {
			if _, err := io.WriteString(out, o.Prompt); err != nil {
				return err
			}
		}
		if !sc.Scan() {
			return sc.Err()
		}
		line := strings.TrimSpace(sc.Text())
		switch line {
		case "":
			continue
		case "/quit", "/exit":
			return nil
		case "/reset":
			reset()
			if o.Completion {
				fmt.Fprintln(out, "(plain completion keeps no history)")
			} else {
				fmt.Fprintln(out, "(history cleared)")
			}
			continue
		}
		if o.Completion {
			if _, err := io.WriteString(out, line); err != nil {
				return err
			}
			if _, err := streamAnswer(ctx, out, func(write func(string) error) (string, error) {
				_, err := c.CompleteStream(ctx, CompletionRequest{Model: o.Model, Prompt: line, MaxTokens: o.MaxTokens,
					Temperature: o.Temperature, Seed: o.Seed, Profile: o.Profile}, write)
				return "", err
			}); err != nil {
				return err
			}
			continue
		}
		turn := append(history, engine.Message{Role: "user", Content: line})
		text, err := streamAnswer(ctx, out, func(write func(string) error) (string, error) {
			res, err := c.ChatStream(ctx, ChatRequest{Model: o.Model, Messages: turn, MaxTokens: o.MaxTokens,
				Temperature: o.Temperature, Seed: o.Seed, Profile: o.Profile}, write)
			return res.Text, err
		})
		if err != nil {
			return err
		}
		if text != nil {
			history = append(turn, engine.Message{Role: "assistant", Content: *text})
		}
	}
}

// streamAnswer streams one answer to out through send and ends it with a
// newline. A failed answer is reported on out and gives a nil text; only
// ctx's end or a failed write of out ends the conversation (err). In
// plain completion the continuation follows the prompt the caller wrote.
func streamAnswer(ctx context.Context, out io.Writer, send func(write func(string) error) (string, error)) (*string, error) {
	text, err := send(func(s string) error {
		_, err := io.WriteString(out, s)
		return err
	})
	if _, werr := io.WriteString(out, "\n"); werr != nil {
		return nil, werr
	}
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		fmt.Fprintf(out, "error: %v\n", err)
		return nil, nil
	}
	return &text, nil
}
