package cli

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// miniHub serves one repository the way the Hugging Face hub does: a file
// list, and resolve URLs that redirect to a blob URL with the LFS sha256
// and size in X-Linked-Etag and X-Linked-Size.
func miniHub(t *testing.T, repo string, files map[string][]byte) *httptest.Server {
	t.Helper()
	mux := http.NewServeMux()
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	mux.HandleFunc("GET /api/models/"+repo, func(w http.ResponseWriter, r *http.Request) {
		var out struct {
			Siblings []map[string]string `json:"siblings"`
		}
		for name := range files {
			out.Siblings = append(out.Siblings, map[string]string{"rfilename": name})
		}
		json.NewEncoder(w).Encode(out) //nolint:errcheck
	})
	mux.HandleFunc("GET /"+repo+"/resolve/main/{file...}", func(w http.ResponseWriter, r *http.Request) {
		data, ok := files[r.PathValue("file")]
		if !ok {
			http.NotFound(w, r)
			return
		}
		sum := sha256.Sum256(data)
		w.Header().Set("X-Linked-Etag", `"`+hex.EncodeToString(sum[:])+`"`)
		w.Header().Set("X-Linked-Size", strconv.Itoa(len(data)))
		w.Header().Set("Location", "/cdn/"+r.PathValue("file"))
		w.WriteHeader(http.StatusFound)
	})
	mux.HandleFunc("GET /cdn/{file...}", func(w http.ResponseWriter, r *http.Request) {
		data := files[r.PathValue("file")]
		http.ServeContent(w, r, "", time.Unix(1700000000, 0), strings.NewReader(string(data)))
	})
	return srv
}

// TestModelPullListRm: pull a real GGUF from a local hub, generate with it
// by its store name (the same text as from the file), list it, remove it.
func TestModelPullListRm(t *testing.T) {
	model := filepath.Join(t.TempDir(), "m.gguf")
	if _, err := run(t, "model", "gen", "--out", model, "--layers", "2", "--seed", "5"); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(model)
	if err != nil {
		t.Fatal(err)
	}
	hub := miniHub(t, "strata/Tiny-GGUF", map[string][]byte{"tiny-F32.gguf": data, "README.md": []byte("hi")})
	t.Setenv("STRATA_HOME", t.TempDir())
	t.Setenv("HF_ENDPOINT", hub.URL)
	t.Setenv("HF_TOKEN", "")

	if out, err := run(t, "model", "list"); err != nil || out != "" {
		t.Fatalf("empty store: %q, %v", out, err)
	}
	out, err := run(t, "model", "pull", "strata/Tiny-GGUF:f32")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(out, "strata/Tiny-GGUF:f32\t") || !strings.Contains(out, "tiny-F32.gguf") {
		t.Fatalf("pull printed %q", out)
	}
	out, err = run(t, "model", "list")
	if err != nil || !strings.Contains(out, "strata/Tiny-GGUF:f32") || !strings.Contains(out, "hf://strata/Tiny-GGUF@main") {
		t.Fatalf("list: %q, %v", out, err)
	}
	gen := []string{"generate", "--prompt", "Once upon a time", "--max-tokens", "8", "--model"}
	fromFile, err := run(t, append(gen, model)...)
	if err != nil {
		t.Fatal(err)
	}
	fromStore, err := run(t, append(gen, "strata/Tiny-GGUF:F32")...)
	if err != nil {
		t.Fatal(err)
	}
	if fromStore != fromFile || strings.TrimSpace(fromFile) == "" {
		t.Fatalf("store model generated %q, the file %q", fromStore, fromFile)
	}
	if _, err := run(t, append(gen, "strata/Other-GGUF:f32")...); err == nil || !strings.Contains(err.Error(), "strata model pull") {
		t.Fatalf("a name the store lacks: %v", err)
	}
	if out, err := run(t, "model", "rm", "strata/Tiny-GGUF:f32"); err != nil || !strings.Contains(out, "removed strata/Tiny-GGUF:f32") {
		t.Fatalf("rm: %q, %v", out, err)
	}
	if out, err := run(t, "model", "list"); err != nil || out != "" {
		t.Fatalf("after rm: %q, %v", out, err)
	}
	// hf:// is pulled on the fly by --model.
	fromHF, err := run(t, append(gen, "hf://strata/Tiny-GGUF/tiny-F32.gguf")...)
	if err != nil || fromHF != fromFile {
		t.Fatalf("hf:// model: %q, %v", fromHF, err)
	}
}

// TestModelPullSplitServes: a split model pulled from the hub by its quant
// lands as its parts side by side, and generate by the store name reads
// all of them: the same text as the single file.
func TestModelPullSplitServes(t *testing.T) {
	dir := t.TempDir()
	args := []string{"model", "gen", "--layers", "3", "--seed", "9"}
	single := filepath.Join(dir, "one.gguf")
	if _, err := run(t, append(args, "--out", single)...); err != nil {
		t.Fatal(err)
	}
	if _, err := run(t, append(args, "--out", filepath.Join(dir, "Tiny-F32.gguf"), "--split-max-tensors", "12")...); err != nil {
		t.Fatal(err)
	}
	parts, _ := filepath.Glob(filepath.Join(dir, "Tiny-F32-*-of-*.gguf"))
	if len(parts) < 2 {
		t.Fatalf("parts %v: want a split model", parts)
	}
	files := map[string][]byte{}
	for _, p := range parts {
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		files[filepath.Base(p)] = data
	}
	hub := miniHub(t, "strata/Split-GGUF", files)
	t.Setenv("STRATA_HOME", t.TempDir())
	t.Setenv("HF_ENDPOINT", hub.URL)
	t.Setenv("HF_TOKEN", "")
	if _, err := run(t, "model", "pull", "strata/Split-GGUF:f32"); err != nil {
		t.Fatal(err)
	}
	gen := []string{"generate", "--prompt", "Once upon a time", "--max-tokens", "8", "--model"}
	want, err := run(t, append(gen, single)...)
	if err != nil {
		t.Fatal(err)
	}
	got, err := run(t, append(gen, "strata/Split-GGUF:f32")...)
	if err != nil {
		t.Fatal(err)
	}
	if got != want || strings.TrimSpace(want) == "" {
		t.Fatalf("split model from the store generated %q, the single file %q", got, want)
	}
}
