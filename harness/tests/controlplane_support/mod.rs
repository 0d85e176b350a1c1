//! What the control-plane tests share: the Machina CRDs installed in the lab's cluster.

use std::time::{Duration, Instant};

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, PostParams};

/// The Machina CRDs are installed and established (the lab's control plane applies them; a
/// cluster without them gets them here).
pub async fn ensure_crds(admin: &kube::Client) {
    let crds: Api<CustomResourceDefinition> = Api::all(admin.clone());
    for crd in agent::machina::crds::all() {
        let name = crd.metadata.name.clone().unwrap();
        if crds.get_opt(&name).await.unwrap().is_none() {
            crds.create(&PostParams::default(), &crd).await.unwrap();
            let deadline = Instant::now() + Duration::from_secs(30);
            while Instant::now() < deadline {
                let got = crds.get(&name).await.unwrap();
                let established = got
                    .status
                    .and_then(|s| s.conditions)
                    .unwrap_or_default()
                    .iter()
                    .any(|c| c.type_ == "Established" && c.status == "True");
                if established {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }
}
