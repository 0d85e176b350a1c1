//! The Corefile of a goal: its template (the built-in one or `CorefileTemplate`) rendered with the
//! goal's values, checked ([`crate::corefile::check`]), under the generated-file header; and the
//! fallback the supervisor serves when CoreDNS refuses it.

use super::HEADER;
use crate::corefile::{
    BUILTIN_TEMPLATE, COREDNS_METRICS_ADDRESS, CorefileError, FALLBACK_TEMPLATE, HEALTH_NAME, READY_PORT,
    TemplateContext, check, render_template,
};
use crate::goal::LocalDnsGoal;

/// The template's values for a goal.
pub fn context(g: &LocalDnsGoal) -> TemplateContext {
    let upstreams: Vec<String> = g.upstreams.iter().map(ToString::to_string).collect();
    let cluster_dns = g.cluster_dns.to_string();
    let blocks =
        |zones: &[crate::zones::Zone]| zones.iter().map(|z| z.block(&upstreams, &cluster_dns)).collect();
    TemplateContext {
        node_zones: blocks(&g.node_zones),
        cluster_zones: blocks(&g.cluster_zones),
        node_listener: g.node_listener.to_string(),
        cluster_listener: g.cluster_listener.to_string(),
        cluster_dns: cluster_dns.clone(),
        upstreams: upstreams.clone(),
        metrics_address: COREDNS_METRICS_ADDRESS.to_string(),
        health_name: HEALTH_NAME,
        ready_port: READY_PORT,
        coredns_version: g.coredns_version.to_string(),
        required_plugins: g.required_plugins.iter().map(ToString::to_string).collect(),
    }
}

/// Renders the Corefile for a goal and checks it ([`check`]).
pub fn render(goal: &LocalDnsGoal) -> Result<String, CorefileError> {
    let template = goal.corefile_template.as_deref().unwrap_or(BUILTIN_TEMPLATE);
    let context = context(goal);
    let body = render_template(template, &context)?;
    check(&body, &context)?;
    Ok(format!("{HEADER}{body}"))
}

/// Renders the fallback Corefile for a goal ([`FALLBACK_TEMPLATE`], whatever the goal's template)
/// and checks it as [`render`] does.
pub fn render_fallback(goal: &LocalDnsGoal) -> Result<String, CorefileError> {
    let context = context(goal);
    let body = render_template(FALLBACK_TEMPLATE, &context)?;
    check(&body, &context)?;
    Ok(format!("{HEADER}{body}"))
}
