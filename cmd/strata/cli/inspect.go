package cli

import (
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/spf13/cobra"

	"github.com/stratanet/strata/engine"
)

func newModelInspectCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "inspect FILE.gguf",
		Short: "print a model file's architecture, tensor types, bytes per layer, tokenizer and chat template, and whether this build runs it",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			f, fh, err := engine.OpenFile(args[0])
			if err != nil {
				return err
			}
			defer fh.Close()
			inspectModel(cmd.OutOrStdout(), f)
			return nil
		},
	}
}

// inspectModel writes what a user needs to know about f before running it.
func inspectModel(w io.Writer, f *engine.File) {
	arch, _ := f.String("general.architecture")
	name, _ := f.String("general.name")
	fmt.Fprintf(w, "file: GGUF v%d, %d tensors, %d bytes, alignment %d\n", f.Version, len(f.Tensors), f.Size, f.Alignment)
	if len(f.Parts) > 1 {
		fmt.Fprintf(w, "split into %d parts:\n", len(f.Parts))
		for i, p := range f.Parts {
			fmt.Fprintf(w, "  %d: %s, %d tensors, %d bytes\n", i+1, p.Path, p.Tensors, p.Size)
		}
	}
	fmt.Fprintf(w, "model: %s (architecture %s)\n", name, arch)
	if fp, err := f.Fingerprint(); err == nil {
		fmt.Fprintf(w, "  fingerprint %s (a node without the file joins with it: strata node --model-id)\n", fp)
	}
	hp, hpErr := engine.ReadHParams(f)
	if hpErr == nil {
		fmt.Fprintf(w, "  layers %d, hidden %d, heads %d (KV %d, head size %d), ffn %d, vocab %d, context %d\n",
			hp.Layers, hp.Dim, hp.Heads, hp.KVHeads, hp.HeadDim, hp.FFN, hp.Vocab, hp.Context)
		fmt.Fprintf(w, "  rope base %g%s, rms eps %g\n", hp.RopeBase, map[bool]string{true: " with rope_freqs factors"}[hp.RopeFactors], hp.NormEps)
		if hp.LongRoPE {
			fmt.Fprintf(w, "  LongRoPE: short factors, attention factor %g; context capped at the original %d of %d trained (long factors not supported)\n",
				hp.RopeAttnFactor, hp.Context, hp.TrainContext)
		}
		if hp.RopeScaling != "" {
			fmt.Fprintf(w, "  RoPE scaling %s: factor %g, original context %d", hp.RopeScaling, 1/hp.RopeFreqScale, hp.RopeOrigContext)
			if hp.RopeScaling == "yarn" {
				fmt.Fprintf(w, ", ext_factor %g, beta_fast %g, beta_slow %g", hp.YarnExtFactor, hp.YarnBetaFast, hp.YarnBetaSlow)
			}
			fmt.Fprintln(w)
		}
		if hp.MoE() {
			fmt.Fprintf(w, "  mixture of experts: %d experts, %d active per token, %d shared, each %d wide\n",
				hp.Experts, hp.ExpertsUsed, hp.SharedExperts, hp.ExpertFFN)
		}
		if hp.Arch == "deepseek2" {
			inspectDeepSeek2(w, hp)
		}
		switch {
		case hp.SlidingWindow > 0 && hp.Arch == "gpt-oss":
			fmt.Fprintf(w, "  sliding window %d on layers 0, 2, 4, …; attention sinks on every layer\n", hp.SlidingWindow)
		case hp.SlidingWindow > 0 && (hp.Arch == "gemma3" || hp.Arch == "gemma2"):
			fmt.Fprintf(w, "  sliding window %d on the local layers", hp.SlidingWindow)
			if hp.AttnSoftCap != 0 || hp.FinalSoftCap != 0 {
				fmt.Fprintf(w, "; soft caps: attention %g, final logits %g", hp.AttnSoftCap, hp.FinalSoftCap)
			}
			fmt.Fprintln(w)
		case hp.SlidingWindow > 0:
			fmt.Fprintf(w, "  sliding window %d declared, not applied (full attention; llama.cpp runs phi3 without it too)\n", hp.SlidingWindow)
		}
	} else if n, err := f.Uint(arch + ".expert_count"); err == nil && n > 0 {
		// A mixture of experts this build refuses: its shape all the same.
		used, _ := f.Uint(arch + ".expert_used_count")
		shared, _ := f.Uint(arch + ".expert_shared_count")
		fmt.Fprintf(w, "  mixture of experts: %d experts, %d active per token, %d shared\n", n, used, shared)
	}

	type agg struct{ count, bytes int64 }
	types := map[engine.DType]*agg{}
	perLayer := map[int]int64{}
	var experts int64 // bytes of the layers' expert tensors (ffn_*_exps)
	var other int64
	var unsupported []string
	for _, t := range f.Tensors {
		a := types[t.Type]
		if a == nil {
			a = &agg{}
			types[t.Type] = a
		}
		a.count++
		a.bytes += t.Size
		var l int
		if _, err := fmt.Sscanf(t.Name, "blk.%d.", &l); err == nil {
			perLayer[l] += t.Size
			if strings.Contains(t.Name, "_exps.") {
				experts += t.Size
			}
		} else {
			other += t.Size
		}
		if !t.Type.Supported() && len(unsupported) < 3 {
			unsupported = append(unsupported, fmt.Sprintf("%s is %s", t.Name, t.Type))
		}
	}
	fmt.Fprintln(w, "tensor types:")
	keys := make([]engine.DType, 0, len(types))
	for t := range types {
		keys = append(keys, t)
	}
	sort.Slice(keys, func(i, j int) bool { return types[keys[i]].bytes > types[keys[j]].bytes })
	for _, t := range keys {
		fmt.Fprintf(w, "  %-8s %5d tensors %14d bytes\n", t, types[t].count, types[t].bytes)
	}
	if len(perLayer) > 0 {
		lo, hi := int64(-1), int64(0)
		for _, b := range perLayer {
			if lo < 0 || b < lo {
				lo = b
			}
			hi = max(hi, b)
		}
		fmt.Fprintf(w, "bytes per layer: %d to %d (%d layers); outside the layers (embedding, head, norms): %d\n", lo, hi, len(perLayer), other)
		if hpErr == nil && hp.MoE() {
			var all int64
			for _, b := range perLayer {
				all += b
			}
			// A token reads the attention, the router and its experts.
			active := (all - experts + experts*int64(hp.ExpertsUsed)/int64(hp.Experts)) / int64(len(perLayer))
			fmt.Fprintf(w, "  experts: %d bytes per layer on average, of which a token reads %d (%d of %d experts)\n",
				all/int64(len(perLayer)), active, hp.ExpertsUsed, hp.Experts)
		}
	}
	model, _ := f.String("tokenizer.ggml.model")
	pre, _ := f.String("tokenizer.ggml.pre")
	fmt.Fprintf(w, "tokenizer: %s, pre-tokenizer %q\n", model, pre)
	if tmpl, err := f.String("tokenizer.chat_template"); err == nil && tmpl != "" {
		lines := strings.Split(tmpl, "\n")
		fmt.Fprintf(w, "chat template (%d lines):\n", len(lines))
		for _, l := range lines[:min(len(lines), 5)] {
			fmt.Fprintf(w, "  | %s\n", l)
		}
	} else {
		fmt.Fprintln(w, "chat template: none (a generic one is used)")
	}
	var why []string
	if hpErr != nil {
		why = append(why, hpErr.Error())
	}
	why = append(why, unsupported...)
	if len(why) == 0 {
		fmt.Fprintln(w, "runs on this build: yes")
		return
	}
	fmt.Fprintf(w, "runs on this build: no: %s\n", strings.Join(why, "; "))
}

// inspectDeepSeek2 writes deepseek2's attention and routing shape.
func inspectDeepSeek2(w io.Writer, hp engine.HParams) {
	q := fmt.Sprintf("Q LoRA rank %d", hp.QLoraRank)
	if hp.QLoraRank == 0 {
		q = "plain Q projection"
	}
	layout, cache := "attn_kv_b (K and V decompressed and cached per head)", hp.Heads*(hp.NopeDims+hp.RopeDims+hp.VHeadDim)
	if hp.MLA {
		layout, cache = "attn_k_b/attn_v_b (run absorbed; the cache holds the latent and the RoPE part)", hp.KVLoraRank+hp.RopeDims
	}
	fmt.Fprintf(w, "  latent attention: %s, KV LoRA rank %d, head Q·K %d (%d RoPE + %d), V %d; %s: %d values per token and layer cached\n",
		q, hp.KVLoraRank, hp.NopeDims+hp.RopeDims, hp.RopeDims, hp.NopeDims, hp.VHeadDim, layout, cache)
	if !hp.MoE() {
		return
	}
	gating := map[int]string{1: "softmax", 2: "sigmoid"}[hp.ExpertGating]
	groups := "no expert groups"
	if hp.ExpertGroups > 1 {
		groups = fmt.Sprintf("%d expert groups of %d, the best %d kept", hp.ExpertGroups, hp.Experts/hp.ExpertGroups, hp.GroupsUsed)
	}
	fmt.Fprintf(w, "  routing: %s, %s, weights renormalised %v, scaled by %g; %d leading dense layers of ffn %d\n",
		gating, groups, hp.ExpertWeightsNorm, hp.ExpertWeightsScale, hp.LeadingDense, hp.FFN)
}
