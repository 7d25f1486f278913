// Package chunks moves verified byte ranges of model files between
// peers, and knows no model format.
//
// # What it owns
//
//   - The Manifest: a file as fixed-size chunks with a SHA-256 each, and
//     its layout (header size, a tensor table of names, opaque type codes,
//     dims and byte ranges) as given to Build, with its wire encoding. The
//     table's names say which tensors a layer range needs (TensorsFor,
//     ChunksFor: "blk.N." and the embedding and head names); nothing here
//     reads what a tensor's bytes or type mean.
//   - The protocol on /strata/chunk/1 (wire.go): a Server serves the
//     chunks of the files, readers and slices it holds; a Fetcher gets
//     chunks from several holders in parallel and checks each against
//     the manifest, dropping holders that lie or stall.
//   - Part and edges files (part.go): chunks collected at their offsets
//     in the full file, sparse, so that a stopped fetch resumes; a
//     SliceReader rebuilds full-file chunks from a slice's tensor bytes
//     at the offsets its opener found, and hands out only those whose
//     hash is the manifest's.
//
// # What it must not touch
//
// Model files. Reading a GGUF header into a Layout, writing the GGUF
// slice of a layer range and finding a slice's tensors are
// engine/slicefile's; node wires the two. This package never imports
// engine.
package chunks
