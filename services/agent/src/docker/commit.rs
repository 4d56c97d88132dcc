//! Commits: a session's main container written to a customized image through the engine
//! (`docker commit`, the container paused meanwhile), labelled with its owner, pushed when a
//! registry is configured, each step reported. Mounted folders and the scratch volume
//! (`/home/work`) are volumes, which a commit leaves out. When the control plane refuses the
//! end (the session was force-terminated meanwhile), the image made is removed again.

use std::collections::HashMap;

use bollard::container::Config;
use bollard::image::{
    CommitContainerOptions, PushImageOptions, RemoveImageOptions, TagImageOptions,
};
use bus::protocol::{Answer, Fact};
use domain::payloads::{CommitOutcome, CommitStep};
use futures::StreamExt;
use uuid::Uuid;

use super::ctx::Ctx;
use super::registry::{repository_and_tag, Registry};
use super::spec::{container_name, LABEL_TERMINAL_PORT};

/// The label naming a customized image's owner.
pub const LABEL_OWNER: &str = "ai.berth.owner";

/// One commit asked of this agent.
#[derive(Debug, Clone)]
pub(super) struct CommitOrder {
    pub session_id: Uuid,
    pub commit_id: Uuid,
    pub owner: Uuid,
    pub image: String,
}

pub(super) async fn commit(ctx: Ctx, order: CommitOrder) {
    let CommitOrder {
        session_id,
        commit_id,
        ..
    } = order;
    progress(&ctx, &order, CommitStep::Started, String::new()).await;
    let outcome = match write(&ctx, &order).await {
        Ok(done) => done,
        Err(reason) => CommitOutcome::Failed { reason },
    };
    let made = matches!(outcome, CommitOutcome::Done { .. });
    let fact = Fact::CommitEnded { commit_id, outcome };
    match ctx.link.report(session_id, fact, &ctx.stop).await {
        Ok(Answer::Recorded { .. }) => {}
        answered => {
            tracing::info!(%session_id, %commit_id, ?answered, "the commit's end was not recorded");
            if made {
                // The commit is over for the control plane: nobody will be offered this image.
                remove_image(&ctx, &order.image).await;
            }
        }
    }
}

/// Writes the image and pushes it where a registry is configured.
async fn write(ctx: &Ctx, order: &CommitOrder) -> Result<CommitOutcome, String> {
    let (repo, tag) = order
        .image
        .rsplit_once(':')
        .ok_or_else(|| format!("`{}` has no tag", order.image))?;
    let labels = HashMap::from([
        (LABEL_OWNER.to_owned(), order.owner.to_string()),
        (
            "ai.berth.committed-from".to_owned(),
            order.session_id.to_string(),
        ),
        // The session's terminal port is its own, not the image's.
        (LABEL_TERMINAL_PORT.to_owned(), String::new()),
    ]);
    let options = CommitContainerOptions {
        container: container_name(order.session_id, 0),
        repo: repo.to_owned(),
        tag: tag.to_owned(),
        comment: format!("berth session {}", order.session_id),
        author: "berth".to_owned(),
        pause: true,
        changes: None,
    };
    let config = Config {
        labels: Some(labels),
        ..Default::default()
    };
    let committed = ctx
        .docker
        .commit_container(options, config)
        .await
        .map_err(|e| format!("the engine could not commit the container: {e}"))?;
    let image_id = committed.id.unwrap_or_default();
    let size_bytes = ctx
        .docker
        .inspect_image(&order.image)
        .await
        .ok()
        .and_then(|i| i.size)
        .unwrap_or(0)
        .max(0) as u64;
    progress(ctx, order, CommitStep::LayerWritten, image_id.clone()).await;
    let pushed = match &ctx.config.registry {
        Some(registry) => {
            push(ctx, registry, &order.image).await?;
            progress(
                ctx,
                order,
                CommitStep::Pushed,
                format!("{}/{}", registry.address, order.image),
            )
            .await;
            true
        }
        None => false,
    };
    Ok(CommitOutcome::Done {
        image_id,
        size_bytes,
        pushed,
    })
}

/// Tags the image under `registry` and pushes it there, with the registry's credential.
async fn push(ctx: &Ctx, registry: &Registry, image: &str) -> Result<(), String> {
    let (repo, tag) = repository_and_tag(image);
    let target = format!("{}/{repo}", registry.address);
    let credentials = registry.credentials();
    let registry = &registry.address;
    let options = TagImageOptions {
        repo: target.clone(),
        tag: tag.to_owned(),
    };
    ctx.docker
        .tag_image(image, Some(options))
        .await
        .map_err(|e| format!("could not tag the image for {registry}: {e}"))?;
    let mut pushing = ctx.docker.push_image(
        &target,
        Some(PushImageOptions {
            tag: tag.to_owned(),
        }),
        credentials,
    );
    while let Some(step) = pushing.next().await {
        let step = step.map_err(|e| format!("the push to {registry} failed: {e}"))?;
        if let Some(error) = step.error {
            return Err(format!("the push to {registry} failed: {error}"));
        }
    }
    Ok(())
}

async fn progress(ctx: &Ctx, order: &CommitOrder, step: CommitStep, detail: String) {
    let fact = Fact::CommitProgressed {
        commit_id: order.commit_id,
        step,
        detail,
    };
    if let Err(e) = ctx.link.report(order.session_id, fact, &ctx.stop).await {
        tracing::info!(session_id = %order.session_id, error = %e, "a commit step was not reported");
    }
}

/// Removes a customized image from this host (its owner removed it, or its commit failed).
pub(super) async fn remove_image(ctx: &Ctx, image: &str) {
    let options = RemoveImageOptions {
        force: true,
        ..Default::default()
    };
    if let Err(e) = ctx.docker.remove_image(image, Some(options), None).await {
        tracing::info!(image, error = %e, "could not remove the image");
    }
}
