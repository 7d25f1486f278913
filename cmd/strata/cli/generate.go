package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/stratanet/strata/engine"
)

func newGenerateCmd() *cobra.Command {
	var (
		model, prompt, stages string
		maxTokens, threads    int
		seed                  uint64
		temperature, topP     float32
		topK                  int
		chat                  bool
	)
	cmd := &cobra.Command{
		Use:   "generate",
		Short: "Generate text in one process (optionally split into in-process stages)",
		Long: `generate runs a model file in this process, optionally cut into stages that
pass hidden states to each other as swarm hops would, and prints only the
completion on stdout; statistics go to stderr.`,
		Example: `  strata generate --model model.gguf --prompt "Once upon a time" --max-tokens 32
  strata generate --model model.gguf --prompt "Hi" --stages 0:2,2:4 --seed 7 --temperature 0.8`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if model == "" {
				return errors.New("generate: --model is required")
			}
			model, err := resolveModel(cmd, model)
			if err != nil {
				return fmt.Errorf("generate: --model: %w", err)
			}
			var cuts []int
			if stages != "" {
				var err error
				if cuts, err = engine.ParseStages(stages); err != nil {
					return err
				}
			}
			tok, err := engine.LoadTokenizer(model)
			if err != nil {
				return err
			}
			p, err := engine.OpenPipeline(model, cuts, engine.WithThreads(threads))
			if err != nil {
				return err
			}
			defer p.Close()
			ids := tok.Encode(prompt, true, false)
			if chat {
				// As the API encodes a chat completion of one user message.
				if ids, err = tok.EncodeChat([]engine.Message{{Role: "user", Content: prompt}}, nil); err != nil {
					return err
				}
			}
			sess, err := p.NewSession(len(ids) + maxTokens)
			if err != nil {
				return err
			}
			defer sess.Close()
			out := cmd.OutOrStdout()
			sp := engine.SamplingParams{Temperature: temperature, TopK: topK, TopP: topP, Seed: seed}
			start := time.Now()
			var first time.Duration
			n := 0
			_, err = sess.Generate(cmd.Context(), ids, maxTokens, sp, tok.IsEnd, func(id int32) {
				if n == 0 {
					first = time.Since(start)
				}
				n++
				if !tok.IsEnd(id) {
					out.Write(tok.Piece(id))
				}
			})
			fmt.Fprintln(out)
			total := time.Since(start)
			rate := 0.0
			if n > 1 {
				rate = float64(n-1) / (total - first).Seconds()
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "prompt %d tokens, generated %d, first token %v, decode %.1f tok/s, %d stage(s)\n",
				len(ids), n, first.Round(time.Microsecond), rate, len(p.Stages))
			return err
		},
	}
	f := cmd.Flags()
	f.StringVar(&model, "model", "", "GGUF model file, model store name or hf://… reference (pulled if missing)")
	f.StringVar(&prompt, "prompt", "", "prompt text")
	f.BoolVar(&chat, "chat", false, "treat the prompt as one user message of a chat, in the model's chat format, as /v1/chat/completions does")
	f.IntVar(&maxTokens, "max-tokens", 32, "tokens to generate")
	f.Uint64Var(&seed, "seed", 0, "sampling seed")
	f.Float32Var(&temperature, "temperature", 0, "sampling temperature (0: greedy)")
	f.Float32Var(&topP, "top-p", 0, "nucleus sampling mass (0 or 1: off)")
	f.IntVar(&topK, "top-k", 0, "sample among the k most likely tokens (0: all)")
	f.StringVar(&stages, "stages", "", "split into in-process stages, such as 0:2,2:4")
	f.IntVar(&threads, "threads", 1, "goroutines per stage")
	return cmd
}

func newDebugCmd() *cobra.Command {
	debug := &cobra.Command{Use: "debug", Short: "Tools for checking the engine"}
	var model, tokens string
	logits := &cobra.Command{
		Use:   "logits",
		Short: "Print the logits of the last position as one JSON array",
		RunE: func(cmd *cobra.Command, _ []string) error {
			if model == "" || tokens == "" {
				return errors.New("debug logits: --model and --tokens are required")
			}
			var ids []int32
			for _, s := range strings.Split(tokens, ",") {
				v, err := strconv.ParseInt(strings.TrimSpace(s), 10, 32)
				if err != nil {
					return fmt.Errorf("debug logits: --tokens: %q is not a token ID", s)
				}
				ids = append(ids, int32(v))
			}
			p, err := engine.OpenPipeline(model, nil)
			if err != nil {
				return err
			}
			defer p.Close()
			sess, err := p.NewSession(len(ids))
			if err != nil {
				return err
			}
			defer sess.Close()
			lg, err := sess.Step(cmd.Context(), ids)
			if err != nil {
				return err
			}
			// Shortest text that parses back to the same float32.
			vals := make([]json.RawMessage, len(lg))
			for i, v := range lg {
				if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
					return fmt.Errorf("debug logits: logit %d is %v", i, v)
				}
				vals[i] = json.RawMessage(strconv.FormatFloat(float64(v), 'g', -1, 32))
			}
			return json.NewEncoder(cmd.OutOrStdout()).Encode(vals)
		},
	}
	logits.Flags().StringVar(&model, "model", "", "GGUF model file")
	logits.Flags().StringVar(&tokens, "tokens", "", "comma-separated token IDs")
	debug.AddCommand(logits, newDebugTokenizeCmd(), newDebugChatTemplateCmd())
	return debug
}

// newDebugTokenizeCmd prints a text's token IDs as Hugging Face's tokenizer
// gives them with add_special_tokens=false: no BOS/EOS, special-token text
// parsed as special tokens.
func newDebugTokenizeCmd() *cobra.Command {
	var model, text string
	cmd := &cobra.Command{
		Use:   "tokenize",
		Short: "Print the token IDs of --text as one JSON array (no BOS/EOS; special-token text is parsed)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if model == "" {
				return errors.New("debug tokenize: --model is required")
			}
			tok, err := engine.LoadTokenizer(model)
			if err != nil {
				return err
			}
			ids := tok.Encode(text, false, true)
			if ids == nil {
				ids = []int32{}
			}
			return json.NewEncoder(cmd.OutOrStdout()).Encode(ids)
		},
	}
	cmd.Flags().StringVar(&model, "model", "", "GGUF model file")
	cmd.Flags().StringVar(&text, "text", "", "text to tokenize")
	return cmd
}

// newDebugChatTemplateCmd prints the prompt the file's chat template
// renders for a chat case, byte for byte, as the API would render it.
func newDebugChatTemplateCmd() *cobra.Command {
	var model, chat string
	cmd := &cobra.Command{
		Use:   "chat-template",
		Short: "Print the prompt the model's chat template renders for a chat case, byte for byte",
		Long: `chat-template renders --chat, a JSON file
{"messages": [...], "tools": [...] or null, "add_generation_prompt": true,
 "extra": {template variables such as enable_thinking}, "now": "2024-07-26"}
with the file's tokenizer.chat_template ("now" pins strftime_now). A chat
the template refuses with raise_exception exits non-zero with its message.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if model == "" || chat == "" {
				return errors.New("debug chat-template: --model and --chat are required")
			}
			data, err := os.ReadFile(chat)
			if err != nil {
				return err
			}
			r, err := engine.ParseChatRequest(data)
			if err != nil {
				return err
			}
			tok, err := engine.LoadTokenizer(model)
			if err != nil {
				return err
			}
			prompt, err := tok.RenderChat(r)
			if err != nil {
				return err
			}
			_, err = io.WriteString(cmd.OutOrStdout(), prompt)
			return err
		},
	}
	cmd.Flags().StringVar(&model, "model", "", "GGUF model file")
	cmd.Flags().StringVar(&chat, "chat", "", "chat case JSON file")
	return cmd
}
