# -*- coding: utf-8 -*-
# Copyright: kubegpu.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Connection options of the controller modules that talk to the Kubernetes API (group kubegpu.fleet.k8s).

Names, aliases and environment variables are kubernetes.core's (doc_fragments/k8s_auth_options.py),
and plugin_utils/k8s/client.py resolves them the same way."""
from __future__ import annotations


class ModuleDocFragment:
    DOCUMENTATION = r"""
options:
  kubeconfig:
    description:
      - Path of a kubeconfig (several joined by C(:) are merged), or an inline kubeconfig as a dict.
      - Default the environment variable E(K8S_AUTH_KUBECONFIG). Unset, and with neither O(host) and
        O(api_key) nor O(context) given, the pod's service account is used when the task runs in a
        pod, else E(KUBECONFIG), else C(~/.kube/config) - as in C(kubernetes.core).
    type: raw
  context:
    description:
      - Context of the kubeconfig to use. Default E(K8S_AUTH_CONTEXT), then the kubeconfig's current context.
    type: str
  host:
    description:
      - URL of the Kubernetes API server. Default E(K8S_AUTH_HOST).
      - With O(api_key) (or O(client_cert) and O(client_key)) it is a complete credential and no
        kubeconfig is read; this is what the AWX / Ansible Automation Platform credential type
        "OpenShift or Kubernetes API Bearer Token" injects.
    type: str
  api_key:
    description:
      - Bearer token for the API. Default E(K8S_AUTH_API_KEY).
      - Never shown in results, messages or diffs.
    type: str
  validate_certs:
    description:
      - Whether to verify the API server's certificate. Default E(K8S_AUTH_VALIDATE_CERTS) or
        E(K8S_AUTH_VERIFY_SSL) (C(0), C(false) and C(no) are false), then the kubeconfig's
        C(insecure-skip-tls-verify), then C(true).
    type: bool
    aliases: [verify_ssl]
  ca_cert:
    description:
      - CA certificate file that signed the API server's certificate. Default E(K8S_AUTH_CA_CERT)
        or E(K8S_AUTH_SSL_CA_CERT), then the kubeconfig's, then the system's CAs.
    type: path
    aliases: [ssl_ca_cert]
  client_cert:
    description: Client certificate file. Default E(K8S_AUTH_CLIENT_CERT) or E(K8S_AUTH_CERT_FILE).
    type: path
    aliases: [cert_file]
  client_key:
    description: Client key file. Default E(K8S_AUTH_CLIENT_KEY) or E(K8S_AUTH_KEY_FILE).
    type: path
    aliases: [key_file]
  proxy:
    description: HTTP proxy URL for the API. Default E(K8S_AUTH_PROXY).
    type: str
  no_proxy:
    description: Hosts not to reach through O(proxy), comma separated. Default E(K8S_AUTH_NO_PROXY).
    type: str
  impersonate_user:
    description: User to impersonate. Default E(K8S_AUTH_IMPERSONATE_USER).
    type: str
  impersonate_groups:
    description: Groups to impersonate. Default E(K8S_AUTH_IMPERSONATE_GROUPS) (comma separated).
    type: list
    elements: str
notes:
  - The connection is resolved exactly as C(kubernetes.core) resolves it - each option, else its
    C(K8S_AUTH_*) variable (the controller's environment with the task's C(environment) keyword
    applied), then the kubeconfig or the in-cluster service account - so
    C(module_defaults) for C(group/kubernetes.core.k8s) and C(group/kubegpu.fleet.k8s) with the same
    values give both the same identity.
  - The C(username), C(password), C(proxy_headers) and C(persist_config) options of C(kubernetes.core) are not
    supported (basic authentication was removed from Kubernetes in 1.19).
"""
