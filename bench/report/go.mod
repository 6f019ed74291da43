module github.com/converge-dev/converge/bench/report

go 1.26.0
