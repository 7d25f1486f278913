//go:build !faultinject

package cli

import (
	"fmt"
	"os"

	"github.com/stratanet/strata/node"
)

// faultOptions: a release build cannot inject faults, and says so rather
// than run honest when a test asked for a liar.
func faultOptions() ([]node.Option, error) {
	if v, ok := os.LookupEnv(faultEnv); ok && v != "" {
		return nil, fmt.Errorf("%s is set, but this binary was built without -tags faultinject", faultEnv)
	}
	return nil, nil
}
