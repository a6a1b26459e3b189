#ifndef HOLMES_VERSION_H
#define HOLMES_VERSION_H
#define HOLMES_VERSION "0.1.0"
#define HOLMES_API_GROUP "holmes.dev"
#define HOLMES_API_VERSION "holmes.dev/v1alpha1"
#endif
