//go:build !amd64

package engine

func attnAV(out, v []float32, stride int, p []float32) { attnAVPortable(out, v, stride, p) }

func softmax(s []float32) { softmaxPortable(s) }
