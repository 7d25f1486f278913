package chunks

import (
	"bytes"
	"context"
	"crypto/sha256"
	"io"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/stratanet/strata/swarm/chunks/chunkstest"
)

// benchPayload is the tensor data of the benchmark's file.
const benchPayload = 64 << 20

// benchFile writes a file of a small header and one 64 MiB tensor of
// varied bytes.
func benchFile(b *testing.B) (string, *Manifest) {
	b.Helper()
	path := filepath.Join(b.TempDir(), "bench.bin")
	const header = 4096
	buf := make([]byte, 1<<20)
	for i := range buf {
		buf[i] = byte(i*7 + i>>8)
	}
	data := make([]byte, 0, header+benchPayload)
	data = append(data, buf[:header]...)
	for range benchPayload / len(buf) {
		data = append(data, buf...)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		b.Fatal(err)
	}
	m, err := Build(bytes.NewReader(data), Layout{Fingerprint: "bench", FileSize: int64(len(data)), DataOffset: header, Layers: 1,
		Tensors: []Tensor{{Name: "blk.0.ffn_up.weight", Dims: []uint64{4096, benchPayload / 4 / 4096}, Offset: header, Size: benchPayload}}})
	if err != nil {
		b.Fatal(err)
	}
	return path, m
}

// BenchmarkChunkTransfer moves a 64 MiB file between two hosts on
// loopback, each iteration three ways in turn, so that the machine's load
// drifts alike for all three: as chunks over /strata/chunk/1 (two streams,
// each chunk verified), as a plain stream over raw TCP (the baseline), and
// over raw TCP hashing what it reads. It reports each one's GB/s and the
// chunk protocol's ratio to both baselines.
func BenchmarkChunkTransfer(b *testing.B) {
	path, m := benchFile(b)
	all := make([]int, m.NumChunks())
	for i := range all {
		all[i] = i
	}
	srv, me := chunkstest.NewHost(b), chunkstest.NewHost(b)
	s := NewServer(srv.Streams())
	defer s.Close()
	if err := s.ServeFile(m, path); err != nil {
		b.Fatal(err)
	}
	chunkstest.Connect(b, me, srv)
	f := NewFetcher(me.Streams(), m)
	viaChunks := func() {
		res, err := f.Fetch(context.Background(), all, []peer.ID{srv.ID()}, func(int, []byte) error { return nil })
		if err != nil || res.Bytes != m.FileSize {
			b.Fatalf("%d bytes: %v", res.Bytes, err)
		}
	}

	file, err := os.Open(path)
	if err != nil {
		b.Fatal(err)
	}
	defer file.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		var req [1]byte
		for {
			if _, err := io.ReadFull(c, req[:]); err != nil {
				return
			}
			if _, err := io.Copy(c, io.NewSectionReader(file, 0, m.FileSize)); err != nil {
				return
			}
		}
	}()
	defer func() { ln.Close(); <-done }()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	buf := make([]byte, m.ChunkSize)
	viaTCP := func(verify bool) {
		c.Write([]byte{1})
		for i := range m.NumChunks() {
			_, n := m.ChunkRange(i)
			if _, err := io.ReadFull(c, buf[:n]); err != nil {
				b.Fatal(err)
			}
			if verify && sha256.Sum256(buf[:n]) != m.Hashes[i] {
				b.Fatal("hash mismatch")
			}
		}
	}

	var tChunks, tTCP, tHash time.Duration
	timed := func(d *time.Duration, fn func()) {
		start := time.Now()
		fn()
		*d += time.Since(start)
	}
	for b.Loop() {
		timed(&tChunks, viaChunks)
		timed(&tTCP, func() { viaTCP(false) })
		timed(&tHash, func() { viaTCP(true) })
	}
	gbps := func(d time.Duration) float64 { return float64(m.FileSize) * float64(b.N) / d.Seconds() / 1e9 }
	b.ReportMetric(gbps(tChunks), "chunks-GB/s")
	b.ReportMetric(gbps(tTCP), "tcp-GB/s")
	b.ReportMetric(gbps(tHash), "tcp+sha256-GB/s")
	b.ReportMetric(tTCP.Seconds()/tChunks.Seconds(), "chunks/tcp")
	b.ReportMetric(tHash.Seconds()/tChunks.Seconds(), "chunks/tcp+sha256")
}
