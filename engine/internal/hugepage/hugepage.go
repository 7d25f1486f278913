// Package hugepage allocates buffers that are read whole, again and again,
// on transparent huge pages where the system grants them: the engine's
// weights, and the reads that membench sets them against, which must read
// the same kind of pages to be a fair measure. It owns nothing else.
package hugepage

// Size is a transparent huge page's size on amd64 and arm64.
const Size = 2 << 20
