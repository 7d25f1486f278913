//go:build !linux

package testnet

import "fmt"

// NamespaceOption configures NewNamespaces.
type NamespaceOption func(*nsOptions)

type nsOptions struct{}

// NewNamespaces needs Linux network namespaces.
func NewNamespaces(NetworkSpec, ...NamespaceOption) (Network, error) {
	return nil, fmt.Errorf("namespace network: %w (Linux only)", ErrUnsupported)
}
