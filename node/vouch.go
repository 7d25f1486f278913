package node

// DefaultChunkRequestRate and DefaultChunkRequestBurst pace each peer's
// chunk requests to this node (chunks.WithPeerRequestRate): at 4 MiB
// chunks, 512 MiB/s a peer, past what a link carries, so only a flood
// waits.
const (
	DefaultChunkRequestRate  = 128
	DefaultChunkRequestBurst = 128
)
