package swarm

import (
	"context"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
)

// The activation benchmarks send frames on ProtocolAct between two hosts
// on loopback and, in the same run, the same frames over a raw TCP
// loopback connection. Each libp2p variant reports its ratio to raw TCP:
//
//	go test -run '^$' -bench Activation -benchtime 2s ./swarm/
//
// Goals (issue 5): per-hop latency of a 16 KB frame at most 3× raw TCP;
// 4 MB frames at 1 GB/s or more with encryption and no swarm key.

const (
	frame16KB = 16 << 10
	frame4MB  = 4 << 20
)

// rawNsPerOp holds the raw TCP figure of the current run, per benchmark.
var rawNsPerOp = map[string]float64{}

type variant struct {
	name string
	opts func() []Option
}

func variants(b *testing.B) []variant {
	return []variant{
		{"tcp-tls", func() []Option { return nil }},
		{"tcp-psk", func() []Option {
			k, err := GenerateSwarmKey()
			if err != nil {
				b.Fatal(err)
			}
			return []Option{WithSwarmKey(k)}
		}},
	}
}

func BenchmarkActivation16KB(b *testing.B) { benchActivation(b, frame16KB, true) }
func BenchmarkActivation4MB(b *testing.B)  { benchActivation(b, frame4MB, false) }

// benchActivation measures one-way per-hop latency (pingpong: each frame
// is sent after the previous one arrived) or streaming throughput.
func benchActivation(b *testing.B, size int, pingpong bool) {
	key := b.Name()
	b.Run("raw-tcp", func(b *testing.B) {
		rawNsPerOp[key] = benchRaw(b, size, pingpong)
	})
	for _, v := range variants(b) {
		b.Run(v.name, func(b *testing.B) {
			ns := benchLibp2p(b, size, pingpong, v.opts())
			report(b, size, ns, rawNsPerOp[key])
		})
	}
}

func report(b *testing.B, size int, ns, raw float64) {
	if ns <= 0 || raw <= 0 {
		return
	}
	b.ReportMetric(ns/raw, "x-raw-tcp")
	b.ReportMetric(float64(size)/ns, "GB/s")
}

func benchLibp2p(b *testing.B, size int, pingpong bool, opts []Option) float64 {
	opts = append(opts, WithDiscovery(false), WithRelayService(false), WithHolePunching(false))
	recv := newTestHost(b, opts...)
	send := newTestHost(b, opts...)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := send.Connect(ctx, recv.AddrInfo()); err != nil {
		b.Fatal(err)
	}
	got := make(chan struct{}, 1024)
	recv.streams.HandleActivations(func(_ peer.ID, frame []byte) error {
		if len(frame) != size {
			return errors.New("short frame")
		}
		got <- struct{}{}
		return nil
	})
	payload := make([]byte, size)
	// Warm up: open the stream and grow the windows.
	for range 8 {
		if err := send.streams.SendActivation(ctx, recv.ID(), payload); err != nil {
			b.Fatal(err)
		}
		<-got
	}
	b.SetBytes(int64(size))
	b.ResetTimer()
	if pingpong {
		for range b.N {
			if err := send.streams.SendActivation(ctx, recv.ID(), payload); err != nil {
				b.Fatal(err)
			}
			<-got
		}
	} else {
		done := make(chan struct{})
		go func() {
			for range b.N {
				<-got
			}
			close(done)
		}()
		for range b.N {
			if err := send.streams.SendActivation(ctx, recv.ID(), payload); err != nil {
				b.Fatal(err)
			}
		}
		<-done
	}
	b.StopTimer()
	return float64(b.Elapsed().Nanoseconds()) / float64(b.N)
}

func benchRaw(b *testing.B, size int, pingpong bool) float64 {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	got := make(chan struct{}, 1024)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		fr := NewFrameReader(c, size)
		for {
			if _, err := fr.Next(); err != nil {
				if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
					b.Log(err)
				}
				return
			}
			got <- struct{}{}
		}
	}()
	c, err := net.DialTimeout("tcp", ln.Addr().String(), 5*time.Second)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	payload := make([]byte, size)
	for range 8 {
		if err := WriteFrame(c, payload, size); err != nil {
			b.Fatal(err)
		}
		<-got
	}
	b.SetBytes(int64(size))
	b.ResetTimer()
	if pingpong {
		for range b.N {
			if err := WriteFrame(c, payload, size); err != nil {
				b.Fatal(err)
			}
			<-got
		}
	} else {
		done := make(chan struct{})
		go func() {
			for range b.N {
				<-got
			}
			close(done)
		}()
		for range b.N {
			if err := WriteFrame(c, payload, size); err != nil {
				b.Fatal(err)
			}
		}
		<-done
	}
	b.StopTimer()
	ns := float64(b.Elapsed().Nanoseconds()) / float64(b.N)
	b.ReportMetric(float64(size)/ns, "GB/s")
	return ns
}
