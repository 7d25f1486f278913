package cli

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/stratanet/strata/engine"
)

func newModelCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "model", Short: "get, list, make and inspect model files"}
	cmd.AddCommand(newModelGenCmd(), newModelInspectCmd(), newModelPullCmd(), newModelListCmd(), newModelRmCmd())
	return cmd
}

func newModelGenCmd() *cobra.Command {
	c := engine.DefaultGenConfig()
	var out, dtype, hfDir string
	var layout engine.FileLayout
	cmd := &cobra.Command{
		Use:   "gen",
		Short: "write a random-weight GGUF model (llama.cpp tensor names and keys, small real vocabulary)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if out == "" {
				return fmt.Errorf("--out is required")
			}
			if dtype == "q4_k_m" || dtype == "q5_k_m" || dtype == "mxfp4_moe" {
				c.Mix = dtype
			} else {
				t, err := engine.ParseDType(dtype)
				if err != nil {
					return err
				}
				c.DType = t
			}
			if hfDir != "" {
				tj, err := os.ReadFile(filepath.Join(hfDir, "tokenizer.json"))
				if err != nil {
					return err
				}
				cj, err := os.ReadFile(filepath.Join(hfDir, "tokenizer_config.json"))
				if err != nil && !errors.Is(err, fs.ErrNotExist) {
					return err
				}
				if c.Tokenizer, c.Vocab, err = engine.HFTokenizerKVs(tj, cj); err != nil {
					return fmt.Errorf("--hf-tokenizer %s: %w", hfDir, err)
				}
			}
			paths, err := engine.GenerateFiles(out, c, layout)
			if err != nil {
				return err
			}
			var size int64
			for _, p := range paths {
				st, err := os.Stat(p)
				if err != nil {
					return err
				}
				size += st.Size()
			}
			names := paths[0]
			if len(paths) > 1 {
				names = fmt.Sprintf("%s … %s (%d parts)", paths[0], filepath.Base(paths[len(paths)-1]), len(paths))
			}
			moe := ""
			if c.Experts > 0 {
				ef := c.ExpertFFN
				if ef == 0 {
					ef = c.FFN
				}
				moe = fmt.Sprintf(", %d of %d experts of width %d", c.ExpertsUsed, c.Experts, ef)
			}
			kvHeads := c.KVHeads
			if c.Arch == "deepseek2" {
				// The layout sets it: one latent head, or every head with kv_b.
				kvHeads = map[bool]int{true: c.Heads, false: 1}[c.DeepSeek2.KVB]
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "wrote %s: %s, %d layers, dim %d, %d/%d heads, ffn %d%s, vocab %d, %s, %d bytes\n",
				names, c.Arch, c.Layers, c.Dim, c.Heads, kvHeads, c.FFN, moe, c.Vocab, dtype, size)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&out, "out", "", "output file")
	f.StringVar(&c.Arch, "arch", c.Arch, "architecture: llama, qwen2, qwen3, qwen3moe, phi3, gemma3, gemma2, gpt-oss (needs --experts) or deepseek2")
	f.IntVar(&c.SlidingWindow, "sliding-window", 0, "gemma3, gemma2: the local layers' attention window (0: 512); gpt-oss: its even layers' window (0: 128)")
	f.IntVar(&c.Experts, "experts", 0, "mixture of experts (qwen3moe, gpt-oss, deepseek2, or llama as Mixtral): experts per layer (0: a dense FFN)")
	f.IntVar(&c.ExpertsUsed, "experts-used", 0, "experts each token uses (with --experts)")
	f.IntVar(&c.ExpertFFN, "expert-ffn", 0, "qwen3moe, gpt-oss, deepseek2: each expert's feed-forward width (0: --ffn); llama's experts are --ffn wide")
	f.IntVar(&c.HeadDim, "head-dim", 0, "head size (0: dim/heads; qwen3 files often set another; deepseek2: a head's Q·K size, 0: 32 + --rope-dims)")
	ds := &c.DeepSeek2
	f.IntVar(&ds.QLoraRank, "q-lora-rank", 0, "deepseek2: attention.q_lora_rank (0: dim/2)")
	f.IntVar(&ds.KVLoraRank, "kv-lora-rank", 0, "deepseek2: attention.kv_lora_rank, the cached latent's width (0: 64)")
	f.IntVar(&ds.RopeDims, "rope-dims", 0, "deepseek2: a head's RoPE part (0: 16)")
	f.IntVar(&ds.VHeadDim, "v-head-dim", 0, "deepseek2: a head's V size (0: 32)")
	f.IntVar(&ds.LeadingDense, "leading-dense", 0, "deepseek2: leading dense layers before the expert layers (0: 1)")
	f.IntVar(&ds.SharedExperts, "shared-experts", 0, "deepseek2: shared experts per expert layer (0: 1)")
	f.IntVar(&ds.ExpertGroups, "expert-groups", 0, "deepseek2: expert groups for group-limited routing (0: none)")
	f.IntVar(&ds.GroupsUsed, "expert-groups-used", 0, "deepseek2: groups kept per token (with --expert-groups)")
	f.Float32Var(&ds.WeightsScale, "expert-weights-scale", 0, "deepseek2: expert_weights_scale (0: 2.5, DeepSeek-V3's)")
	f.BoolVar(&ds.Softmax, "softmax-routing", false, "deepseek2: DeepSeek-V2's softmax routing without renormalisation (default: V3's sigmoid with exp_probs_b)")
	f.BoolVar(&ds.KVB, "kv-b", false, "deepseek2: the older attn_kv_b layout instead of attn_k_b/attn_v_b")
	f.BoolVar(&c.RopeFreqs, "rope-freqs", false, "llama: write rope_freqs.weight with Llama 3.1's RoPE scaling")
	f.BoolVar(&c.LongRoPE, "long-rope", false, "phi3: write LongRoPE factors as Phi-3.5 mini has them (--ctx is then the original context, 32× it the trained one)")
	f.StringVar(&c.RopeScaling, "rope-scaling", "", "llama, qwen2, qwen3, gpt-oss: RoPE scaling to write, linear or yarn (gemma3, gemma2: linear) (with --rope-scaling-factor and --rope-orig-ctx; --ctx is the scaled context)")
	f.Float32Var(&c.RopeScalingFactor, "rope-scaling-factor", 4, "rope.scaling.factor for --rope-scaling")
	f.IntVar(&c.RopeOrigContext, "rope-orig-ctx", 0, "rope.scaling.original_context_length for --rope-scaling (0: --ctx / factor)")
	f.IntVar(&c.Layers, "layers", c.Layers, "transformer layers")
	f.IntVar(&c.Dim, "dim", c.Dim, "embedding width")
	f.IntVar(&c.Heads, "heads", c.Heads, "attention heads")
	f.IntVar(&c.KVHeads, "kv-heads", c.KVHeads, "KV heads (GQA); 0: same as --heads")
	f.IntVar(&c.FFN, "ffn", c.FFN, "feed-forward width")
	f.IntVar(&c.Vocab, "vocab", c.Vocab, "vocabulary size (>= 259)")
	f.IntVar(&c.Context, "ctx", c.Context, "context length written to the metadata")
	f.Uint64Var(&c.Seed, "seed", c.Seed, "random seed: the same flags give the same file")
	f.Float32Var(&c.RopeBase, "rope-base", 0, "RoPE base (0: 10000 for llama and phi3, 150000 for gpt-oss, 1e6 for qwen2 and qwen3)")
	f.Float32Var(&c.NormEps, "norm-eps", 0, "RMSNorm epsilon (0: 1e-5 for llama, phi3 and gpt-oss, 1e-6 for qwen2 and qwen3)")
	f.StringVar(&c.Name, "name", "", "general.name (default strata-random-<arch>)")
	f.BoolVar(&c.Tied, "tied", false, "no output.weight: the head reuses the token embedding")
	f.StringVar(&dtype, "dtype", "f32", "weight type: f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, iq4_nl, q4_k, q5_k, q6_k, iq4_xs, mxfp4, or a mix as llama.cpp quantizes files: q4_k_m, q5_k_m, mxfp4_moe (FFN weights in mxfp4, the rest q8_0)")
	f.IntVar(&layout.SplitMaxTensors, "split-max-tensors", 0, "write a split model, as llama-gguf-split --split-max-tensors N does: parts OUT-00001-of-0000K.gguf (OUT without .gguf) of at most N tensors each")
	f.Var(alignmentFlag{&layout.Alignment}, "alignment", "general.alignment: the tensor data alignment in bytes, a power of two (GGUF's default 32)")
	f.StringVar(&hfDir, "hf-tokenizer", "", "directory with a Hugging Face tokenizer.json (and tokenizer_config.json): use its vocabulary, special tokens and chat template instead of the generated ones (--vocab is then its size)")
	return cmd
}

// alignmentFlag is --alignment: a power of two up to 1 MiB.
type alignmentFlag struct{ v *uint32 }

func (a alignmentFlag) String() string {
	if a.v == nil || *a.v == 0 {
		return "32"
	}
	return strconv.FormatUint(uint64(*a.v), 10)
}

func (a alignmentFlag) Set(s string) error {
	n, err := strconv.ParseUint(s, 10, 32)
	if err != nil || n == 0 || n&(n-1) != 0 || n > 1<<20 {
		return fmt.Errorf("%q is not a power of two up to 1048576", s)
	}
	*a.v = uint32(n)
	return nil
}

func (alignmentFlag) Type() string { return "bytes" }
