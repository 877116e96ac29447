"""Zero-shot image classification: POST /zero-shot-image-classification, a two-tower model's (CLIP, SigLIP) scores of
one image against label texts, as transformers' pipeline of that name takes and answers them (`candidate_labels`,
`hypothesis_template`; a list of {label, score}, highest first): inference.tasks.zero_shot."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Response
from pydantic import BaseModel, Field

from inference.tasks.zero_shot import DEFAULT_TEMPLATE, zero_shot
from service.dependencies import JobDep, ModelQuery, PickDep, needs, require_json
from service.images import decoded, fetching
from service.routes.common import INFERENCE_ERRORS, errors, json_response
from service.schemas import Text, _Request
from service.uploads import Upload

router = APIRouter(tags=["images"], dependencies=[Depends(require_json), Depends(needs("zero_shot"))])


class ZeroShotRequest(_Request):
    image: str = Field(description="The image: a data URI (data:image/png;base64,...) or its bare base64. PNG, JPEG, "
                       "WebP or GIF (its first frame). An http(s) URL is fetched only from a host the server lists "
                       "(ATTNSERVE_IMAGE_URL_HOSTS); other URLs are refused.")
    candidate_labels: Annotated[list[Text], Field(min_length=1)] = Field(
        description="The labels the image is scored against, each written into hypothesis_template.")
    hypothesis_template: Text = Field(DEFAULT_TEMPLATE, description="The text each label is written into, where its "
                                      "one {} is (str.format, as transformers' pipeline writes it).")


class LabelScore(BaseModel):
    label: str
    score: float = Field(description="The pair's own reading of its logit: softmax over the labels (CLIP) or sigmoid "
                         "(SigLIP; GET /info: pair.scoring).")


@router.post("/zero-shot-image-classification", response_model=list[LabelScore], responses=errors(*INFERENCE_ERRORS),
             summary="Zero-shot image classification (CLIP, SigLIP)")
async def classify_image(body: ZeroShotRequest, pick: PickDep, job: JobDep, model: ModelQuery = None) -> Response:
    """The image's score against each label, highest first, as transformers' zero-shot-image-classification
    pipeline gives them: logits = exp(logit_scale) * cosine(image, text) + logit_bias, a softmax over the labels
    (CLIP) or a sigmoid each (SigLIP). Only a two-tower model can (GET /info: `pair`)."""
    served = pick(body.model, model)
    image = await fetching(lambda: decoded(body.image, 0))
    scores = await job(zero_shot(served, image, body.candidate_labels, body.hypothesis_template))
    return json_response([{"label": label, "score": score} for label, score in scores])


# Also as multipart/form-data: -F file=@cat.png -F candidate_labels=cat -F candidate_labels=dog (service.uploads)
UPLOADS = (Upload("/zero-shot-image-classification", ZeroShotRequest, "image"),)
