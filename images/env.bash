# What images/build.sh and images/smoke.sh share (sourced from the repository root): podman's and
# buildah's configuration, and the images' names and tag (TAG: the version in common/version.h
# unless given; REPO_PREFIX: localhost/holmes unless given).
export CONTAINERS_CONF=${CONTAINERS_CONF:-$PWD/images/containers.conf}
version=$(sed -n 's/^#define HOLMES_VERSION "\(.*\)"/\1/p' common/version.h)
TAG=${TAG:-$version}
REPO_PREFIX=${REPO_PREFIX:-localhost/holmes}
