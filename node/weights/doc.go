// Package weights moves a model's weights between the nodes of a swarm:
// the node unit that serves chunks to peers, answers what it holds, and
// fetches the layers it is placed on from those that hold them.
//
// A node that holds the model file builds the file's manifest
// (FileManifest, cached in its data dir), serves the file's chunks on
// /strata/chunk/1 (Server.Serve, through swarm/chunks) and hands the
// manifest to consensus, which commits it when the node leads. A node
// started with the model's fingerprint only asks its bootstrap peers for
// the manifest, fetches the file's header chunks to learn the model
// (OpenRemote), joins, and on each warmup fetches the chunks of its range
// from the holders into a GGUF slice in its data dir (Remote.Slice),
// which the node then loads like a file; from then on it serves the
// slice's chunks in turn. A restart finds the manifest, the header and
// the slice on disk and fetches nothing.
//
// # What it owns
//
//   - The info and manifest requests of the node control protocol
//     (info.go): their wire format, the answers (Server.AnswerInfo,
//     Server.AnswerManifest, a large manifest in pages) and the askers.
//     Their golden bytes are testdata/golden/manifest_pages.txt.
//   - The chunk servers: the file's (Server) and the last fetched
//     slice's (Remote), and the file they read.
//   - The fetch from peers (Remote, fetch.go): which peers hold the file
//     or a slice under the same manifest (slice holders first), the
//     header, the slices, reuse of what older slices share, dropping
//     holders that lie or stall, progress and the fetch rate.
//   - The model's files in the data dir (files.go): the manifest cache,
//     the header, the slices (Slices lists them), and their pruning.
//   - The members' fetch rates, polled while the node leads, which
//     consensus reads at each decision (Server.FetchRate).
//   - The adaptive upload limit (upload.go, uploadctl.go): the node's
//     engine batches timed with uploads running against an EWMA
//     baseline of batches with none, per size class; the chunk servers'
//     limit set AIMD-style: halved when the median is over 1.10× the
//     baseline, raised 1 MB/s per second otherwise; 1 MB/s floor, the
//     operator's cap the ceiling, no limit but that cap while the node
//     serves nothing. A stale or missing baseline is measured again by
//     pausing uploads for at most 0.6 s (at most every 5 s). The
//     controller (uploadControl) is pure; the Governor runs it on the
//     node's clock.
//
// # Seams
//
// It reaches the rest of the node through small interfaces and funcs,
// handed in by the node's wiring: Network (the host's streams: the chunk
// protocol and control calls; RemoteConfig.Dial to connect a bootstrap
// peer), Swarm (what it reads of the consensus replica: leadership, the
// members, the committed manifest), a republisher of the node's status
// (Remote.Bind) whose heartbeats carry the fetch's progress, the
// scheduler's batches and open sessions (Governor), a clock
// (clockwork, for the Governor) and a logger.
//
// # What it must not touch
//
// It never imports package node or any unit above it. It does not
// register the control handler (the node routes requests it recognises
// with IsInfoRequest and IsManifestRequest), load or release layers
// (the node's warmup opens the slices it makes), decide placement
// (consensus does, with the rates it reads) or write the consensus
// state: it only reads the replica through Swarm. Errors wrap its own
// sentinels (ErrBadFrame, ErrUnknownModel, ErrNoManifest, ErrConfig);
// the node gives them its own sentinels at the seam.
package weights
