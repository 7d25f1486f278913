//go:build !linux

package engine

// hasAMX: the tile state needs the OS's leave (amx_linux_amd64.go); only
// Linux's is asked for.
const hasAMX = false
