module github.com/converge-dev/converge/services/scheduler

go 1.26.0
