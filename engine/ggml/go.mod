module github.com/stratanet/strata/engine/ggml

go 1.26.0

require (
	github.com/ollama/ollama v0.17.4
	github.com/stratanet/strata v0.0.0
)

replace github.com/stratanet/strata => ../..
