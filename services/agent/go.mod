module github.com/converge-dev/converge/services/agent

go 1.26.0
