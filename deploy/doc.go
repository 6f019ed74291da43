// Package deploy holds the tests that validate converge's deployment files: the Compose file
// (compose/compose.yaml, loaded and schema-checked with compose-spec/compose-go) and every
// kustomize overlay under kubernetes/ (built with sigs.k8s.io/kustomize/api, each object decoded
// strictly into its k8s.io/api type, then checked against the deployment policy). The images are
// built by images/build.sh (`make images`); cmd/converge-healthcheck is the health probe they carry.
package deploy
