module github.com/converge-dev/converge/services/verifier

go 1.26.0
