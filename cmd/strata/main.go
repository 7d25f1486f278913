// Command strata runs a Strata node and its tools, on the pure-Go engine
// (engine/ggml's cmd/strata is the same command with the ggml engine).
package main

import "github.com/stratanet/strata/cmd/strata/cli"

func main() { cli.Main() }
