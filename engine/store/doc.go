// Package store is the local model store and its downloader, behind
// `strata model pull|list|rm` and the --model flag of strata node and
// strata generate.
//
// The store (DefaultDir: $STRATA_HOME/models, else strata/models under
// the user cache directory) keeps each file once, named by its sha256,
// and a JSON name index mapping references such as
// Qwen/Qwen2.5-7B-Instruct-GGUF:q4_k_m or hf://owner/repo/file.gguf to
// their files (a split model: its parts, in order). Downloads go to
// *.partial files that never count as models; a file lock per file lets
// two pulls of the same file run at once without harm (the second waits,
// then finds it).
//
// A Puller fetches from the Hugging Face hub (or HF_ENDPOINT's mirror, or
// a plain URL): it reads the LFS sha256 and size the hub publishes with its
// redirect (X-Linked-Etag, X-Linked-Size), downloads big files in parallel
// ranges, resumes with Range and If-Range after a broken connection or a
// later run, and checks the sha256 before the file joins the store.
package store
