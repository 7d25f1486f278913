package engine

import "github.com/stratanet/strata/engine/internal/hugepage"

// allocWeights allocates n bytes for weights that a decode streams whole,
// on transparent huge pages (hugepage.Alloc). With 4 KiB pages a stream of
// several rows at once walks the page tables every few lines. Advised
// where the buffer happened to lie rather than on a 2 MiB boundary, a
// TinyLlama-shaped Q4_K_M stage had 408 MB of its 830 resident on huge
// pages, its 2.4 MB matrices none.
func allocWeights(n int) []byte { return hugepage.Alloc(n) }
