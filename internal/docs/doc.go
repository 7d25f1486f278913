// Package docs holds no code of the product: its tests keep README.md and
// docs/ usable as the repository changes. README.md stays short enough for a
// newcomer, every relative link in README.md and docs/**/*.md resolves to a
// file (and heading) of the repository, no document points outside it, and
// every `make X` that README.md names is a target of the Makefile. They read
// files only, so they run in make test at no cost.
package docs
